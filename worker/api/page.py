"""The leaderboard page: server-rendered HTML (Jinja2) for organisers and players, no script and no
third-party asset, light enough to embed in an iframe. A ladder's leaderboard, paged with the
API's cursor and searchable by player id, and a player's page with the rating history drawn as an
inline SVG chart. Not part of the OpenAPI contract."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path as FilePath
from typing import Annotated, NamedTuple

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from worker.api.board import Row, read_page
from worker.api.cursor import Cursor, InvalidCursor
from worker.api.routes import reading, states
from worker.store import api_reads, read_models, standings

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=FilePath(__file__).with_name("templates"))
PAGE_ROWS = 25


class Chart(NamedTuple):
    """An SVG line chart: ``points`` (the polyline's "x,y ..."), ``dots`` (x, y, label), axis
    ``ticks`` (y, label), and its ``width``/``height`` in px."""

    points: str
    dots: list[tuple[float, float, str]]
    ticks: list[tuple[float, str]]
    width: int
    height: int


def rating_chart(ratings: Sequence[float], labels: Sequence[str], width: int = 640, height: int = 240) -> Chart:
    """A chart of ``ratings`` (rating points, oldest first; the first is the rating before the first
    match), each point labelled by ``labels``; y spans the range with 5 % margins, 5 ticks."""
    left, right, top, bottom = 48, 12, 12, 24
    low, high = min(ratings), max(ratings)
    pad = max((high - low) * 0.05, 1.0)
    low, high = low - pad, high + pad
    n = max(len(ratings) - 1, 1)

    def xy(i: int, r: float) -> tuple[float, float]:
        x = left + (width - left - right) * i / n
        y = top + (height - top - bottom) * (high - r) / (high - low)
        return round(x, 1), round(y, 1)

    coords = [xy(i, r) for i, r in enumerate(ratings)]
    ticks = [(xy(0, low + (high - low) * k / 4)[1], f"{low + (high - low) * k / 4:.0f}") for k in range(5)]
    return Chart(" ".join(f"{x},{y}" for x, y in coords), [(x, y, lab) for (x, y), lab in zip(coords, labels)],
                 ticks, width, height)


@router.get("/", response_class=HTMLResponse)
def home() -> RedirectResponse:
    """The ladders' list."""
    return RedirectResponse("/ladders", status_code=307)


@router.get("/ladders", response_class=HTMLResponse)
def ladders_page(request: Request) -> HTMLResponse:
    """Every ladder with a policy in force, linked to its leaderboard."""
    with reading(request) as conn:
        rows = api_reads.ladders_in_force(conn)
    return templates.TemplateResponse(request, "ladders.html", {"ladders": rows})


@router.get("/ladders/{ladder}", response_class=HTMLResponse)
def leaderboard_page(
    request: Request, ladder: Annotated[str, Path(min_length=1, max_length=64)],
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """A page of the ladder's leaderboard (``cursor``: the next page), or with ``q`` the players
    whose id starts with it, with their ranks."""
    with reading(request) as conn:
        generation = api_reads.ladder_generation(conn, ladder)
        if generation is None:
            return templates.TemplateResponse(request, "missing.html", {"what": f"ladder {ladder}"}, status_code=404)
        found_policy = standings.recorded_policy(conn, ladder)
        rules = found_policy[1] if found_policy else None
        if q:
            found = states(conn, ladder, api_reads.search_players(conn, ladder, q))
            return templates.TemplateResponse(request, "leaderboard.html", {
                "ladder": ladder, "q": q, "rows": [
                    Row(s.rank, s.player_id, s.rating, s.games, s.deviation, s.conservative, s.provisional, s.inactive)
                    for s in found],
                "next_cursor": None, "as_of": None, "first": True, "uncertain": rules is not None})
        start = None
        if cursor:
            try:
                start = Cursor.decode(cursor, ladder)
            except InvalidCursor:
                start = None
        if start is not None and (start.generation != generation or not math.isfinite(start.rating)):
            start = None  # a walk a rebuild ended: back to the first page
        page = read_page(conn, ladder, generation, start, PAGE_ROWS, rules)
    return templates.TemplateResponse(request, "leaderboard.html", {
        "ladder": ladder, "q": "", "rows": page.rows, "next_cursor": page.next_cursor, "as_of": page.at,
        "first": start is None, "uncertain": rules is not None})


@router.get("/ladders/{ladder}/players/{player_id:path}", response_class=HTMLResponse)
def player_page(request: Request, ladder: Annotated[str, Path(min_length=1, max_length=64)],
                player_id: Annotated[str, Path(min_length=1, max_length=200)]) -> HTMLResponse:
    """A player's state and rating history, drawn as a chart and listed."""
    with reading(request) as conn:
        found = states(conn, ladder, [player_id]) if api_reads.ladder_generation(conn, ladder) is not None else []
        rows = read_models.history(conn, ladder, player_id) if found else []
    if not found:
        return templates.TemplateResponse(request, "missing.html", {"what": f"player {player_id} on {ladder}"},
                                          status_code=404)
    chart = None
    if rows:
        chart = rating_chart([rows[0]["rating_before"]] + [r["rating_after"] for r in rows],
                             ["start"] + [f"{r['match_id']}: {r['rating_after']:.1f}" for r in rows])
    return templates.TemplateResponse(request, "player.html", {
        "ladder": ladder, "state": found[0], "rows": list(reversed(rows)), "chart": chart})
