"""The ``/v1`` endpoints: ladders, player states (one, or a batch), leaderboard pages, histories,
match status, and the forecast of a proposed match. Each reads through the store's queries on the
API's read-only pool.

On a ladder rated with uncertainty (Glicko-2, Weng-Lin) states and leaderboards follow
``ratings leaderboard``'s rules (:mod:`worker.store.standings`): deviation grown to the moment read,
ranked by the conservative rating, provisional / rankable / inactive marks, all computed on read.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Body, Path, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from engine.policy import RatingPolicy
from worker.api import models
from worker.api.board import read_page
from worker.api.cursor import Cursor, InvalidCursor
from worker.api.problems import ProblemError, problem_responses
from worker.policy.stored import PolicyUnavailable
from worker.store import api_reads, read_models, standings

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

    from engine.policy import AnyPolicy
    from worker.policy.uncertainty import LeaderboardRules

router = APIRouter(prefix="/v1", responses=problem_responses(401, 503))

LADDER = Annotated[str, Path(description="Ladder name.", min_length=1, max_length=64, pattern=models.NO_NUL)]
PLAYER = Annotated[str, Path(description="Player id (percent-encoded).", min_length=1, max_length=200,
                             pattern=models.NO_NUL)]
MAX_PAGE = 200


@contextmanager
def reading(request: Request) -> Iterator[Connection]:
    """A connection of the API's pool, in a read-only transaction ended (rolled back) on exit."""
    pool: ConnectionPool = request.app.state.pool
    with pool.connection() as conn:
        try:
            yield conn
        finally:
            conn.rollback()


def cached(request: Request, payload: BaseModel) -> Response:
    """``payload`` as JSON with an ``ETag`` (a hash of the body) and ``Cache-Control: no-cache``
    (a cache keeps it and asks again each time); 304 with no body when ``If-None-Match`` names it."""
    body = payload.model_dump_json().encode()
    etag = '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    asked = request.headers.get("if-none-match", "")
    if etag in {tag.strip().removeprefix("W/") for tag in asked.split(",")} or asked.strip() == "*":
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _unknown_ladder(ladder: str) -> ProblemError:
    return ProblemError(404, "unknown_ladder", "Unknown ladder",
                        f"no ladder {ladder!r} has a policy in force (GET /v1/ladders lists them)")


def _unknown_player(ladder: str, player_id: str) -> ProblemError:
    return ProblemError(404, "unknown_player", "Unknown player",
                        f"player {player_id!r} has no rating on ladder {ladder!r}")


def _generation(conn: Connection, ladder: str) -> int:
    generation = api_reads.ladder_generation(conn, ladder)
    if generation is None:
        raise _unknown_ladder(ladder)
    return generation


def _policy(conn: Connection, ladder: str) -> tuple[AnyPolicy, LeaderboardRules | None]:
    """The policy in force on ``ladder`` and its leaderboard rules (``None``: Elo); 404
    ``unknown_ladder`` without one, 503 ``policy_unavailable`` when its content cannot be read."""
    try:
        found = standings.recorded_policy(conn, ladder)
    except PolicyUnavailable as exc:
        raise ProblemError(503, "policy_unavailable", "Policy unavailable", str(exc)) from exc
    if found is None:
        raise _unknown_ladder(ladder)
    return found


@router.get("/ladders", response_model=models.Ladders, summary="Ladders and the policy in force on each")
def ladders(request: Request) -> Response:
    """Every ladder with a recorded policy: its model, policy version, history generation, replay order
    and number of players."""
    with reading(request) as conn:
        rows = api_reads.ladders_in_force(conn)
    return cached(request, models.Ladders(ladders=[
        models.Ladder(name=r.ladder, model=r.model, policy_version=r.policy_version, generation=r.generation,
                      apply_order=r.apply_order, players=r.players) for r in rows]))


def _state(s: api_reads.PlayerState, shown: standings.BoardRow | None = None,
           volatility: float | None = None) -> models.PlayerState:
    """The API's state of ``s``; on a ladder rated with uncertainty, with its leaderboard row
    ``shown`` (deviation, conservative rating, marks and rank as of now) and ``volatility``."""
    last = (models.LastMatch(match_id=s.last_match_id, finished_at=s.last_finished_at)
            if s.last_match_id is not None and s.last_finished_at is not None else None)
    common = {"player_id": s.player_id, "rating": s.rating, "games": s.games, "wins": s.wins, "draws": s.draws,
              "losses": s.losses, "peak_rating": s.peak_rating, "last_match": last}
    if shown is None:
        return models.PlayerState(**common, deviation=None, volatility=None, conservative=None, provisional=None,
                                  rankable=None, inactive=None, rank=s.rank)
    return models.PlayerState(**common, deviation=shown.deviation, volatility=volatility,
                              conservative=shown.conservative, provisional=shown.provisional,
                              rankable=shown.rank is not None, inactive=shown.inactive, rank=shown.rank)


def states(conn: Connection, ladder: str, player_ids: list[str]) -> list[models.PlayerState]:
    """The API states of those of ``player_ids`` with a row on ``ladder``, in the order asked. On a
    ladder rated with uncertainty the ranks come from the whole leaderboard as of now (one scan); a
    player the leaderboard leaves out (no match left after deferrals or annulments) is unranked."""
    found = api_reads.player_states(conn, ladder, player_ids)
    _, rules = _policy(conn, ladder)
    if rules is None or not found:
        return [_state(s) for s in found]
    now = time.time()
    stored = read_models.stored_states(conn, ladder)
    shown = {r.player_id: r for r in standings.board(stored, rules, now)}
    out = []
    for s in found:
        kept = stored.get(s.player_id)
        if kept is None:  # gone since the first read (a rebuild switched over): as read first
            out.append(_state(s))
            continue
        row = shown.get(s.player_id)
        if row is None:
            seen = rules.shown(standings.engine_state(kept), now)
            row = standings.BoardRow(None, s.player_id, seen.conservative, kept.rating, seen.deviation,
                                     kept.games_played, seen.provisional, seen.inactive)
        out.append(_state(s, row, kept.volatility))
    return out


@router.get("/ladders/{ladder}/players/{player_id:path}", response_model=models.PlayerState,
            responses=problem_responses(404), summary="One player's state")
def player(request: Request, ladder: LADDER, player_id: PLAYER) -> Response:
    """The player's rating, rank, games and last match on the ladder."""
    with reading(request) as conn:
        _generation(conn, ladder)
        found = states(conn, ladder, [player_id])
    if not found:
        raise _unknown_player(ladder, player_id)
    return cached(request, found[0])


@router.post("/ladders/{ladder}/players", response_model=models.BatchResponse,
             responses=problem_responses(400, 404, 422), summary="The states of up to 1,000 players at once")
def players_batch(request: Request, ladder: LADDER,
                  body: Annotated[models.BatchRequest, Body()]) -> models.BatchResponse:
    """Look up many players in one call (a matchmaker's): the states found, in the order asked
    (an id asked twice is answered once), and the ids with no state on the ladder."""
    asked = list(dict.fromkeys(body.player_ids))
    with reading(request) as conn:
        _generation(conn, ladder)
        found = states(conn, ladder, asked)
    have = {s.player_id for s in found}
    return models.BatchResponse(players=found, not_found=[p for p in asked if p not in have])


def _start(ladder: str, generation: int, cursor: str | None) -> Cursor | None:
    if cursor is None:
        return None
    try:
        start = Cursor.decode(cursor, ladder)
    except InvalidCursor as exc:
        raise ProblemError(400, "invalid_cursor", "Invalid cursor", str(exc)) from exc
    if not math.isfinite(start.rating):
        raise ProblemError(400, "invalid_cursor", "Invalid cursor",
                           "the cursor is not one this API issued: start again without it")
    if start.generation != generation:
        raise ProblemError(409, "stale_cursor", "Stale cursor",
                           f"ladder {ladder!r} was rebuilt since the first page: start again without a cursor")
    return start


@router.get("/ladders/{ladder}/leaderboard", response_model=models.LeaderboardPage,
            responses=problem_responses(400, 404, 409), summary="A page of the leaderboard (keyset cursor)")
def leaderboard(
    request: Request, ladder: LADDER,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Rows per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=2000, description="`next_cursor` of the previous page.")] = None,
) -> Response:
    """Players by rating, highest first (ties share a rank and are ordered by player id). The
    first page fixes the moment ``as_of``; the pages reached through ``next_cursor`` are read as of
    it, so no player is repeated or skipped while ratings change between pages. A rebuild of the
    ladder meanwhile ends the walk (409 ``stale_cursor``)."""
    with reading(request) as conn:
        generation = _generation(conn, ladder)
        _, rules = _policy(conn, ladder)
        page = read_page(conn, ladder, generation, _start(ladder, generation, cursor), limit, rules)
    return cached(request, models.LeaderboardPage(
        ladder=ladder, as_of=page.at, next_cursor=page.next_cursor,
        rows=[models.LeaderboardRow(rank=r.rank, player_id=r.player_id, rating=r.rating, games=r.games,
                                    deviation=r.deviation, conservative=r.conservative, provisional=r.provisional,
                                    inactive=r.inactive) for r in page.rows]))


@router.get("/ladders/{ladder}/history/{player_id:path}", response_model=models.History,
            responses=problem_responses(404), summary="A player's rating history, corrections marked")
def history(request: Request, ladder: LADDER, player_id: PLAYER) -> Response:
    """The player's rated matches in the ladder's current history, oldest first; each row a
    correction rewrote names it (``corrected_by``), and the corrections (late matches placed in
    their position, annulments) are listed with what they did."""
    with reading(request) as conn:
        _generation(conn, ladder)
        if not api_reads.player_states(conn, ladder, [player_id]):
            raise _unknown_player(ladder, player_id)
        rows = read_models.history(conn, ladder, player_id)
        rewrites = api_reads.history_rewrites(conn, ladder, player_id)
        spread = api_reads.history_uncertainty(conn, ladder, player_id)
        corrections = read_models.history_corrections(conn, ladder, player_id)
    none = api_reads.UncertaintyChange(None, None, None, None)
    entries = [models.HistoryEntry(**r, **spread.get(r["match_id"], none)._asdict(),
                                   corrected_by=rewrites.get(r["match_id"])) for r in rows]
    return cached(request, models.History(ladder=ladder, player_id=player_id, entries=entries,
                                          corrections=[models.Correction(**c) for c in corrections]))


def _status(record: api_reads.MatchRecord) -> str:
    if record.ledger is None:
        return "dead_letter"
    return "annulled" if record.ledger.annulled else "applied"


@router.get("/matches/{match_id:path}", response_model=models.MatchStatus, responses=problem_responses(404),
            summary="What became of a match")
def match(request: Request,
          match_id: Annotated[str, Path(min_length=1, max_length=200, pattern=models.NO_NUL)]) -> Response:
    """Applied (with its rating changes), annulled, or dead-lettered (with the reason code and
    detail), with its duplicate deliveries; 404 ``unknown_match`` when nothing about it is on record."""
    with reading(request) as conn:
        record = api_reads.match_record(conn, match_id)
    if record.ledger is None and not record.dead_letters and not record.duplicates:
        raise ProblemError(404, "unknown_match", "Match not seen",
                           f"match {match_id!r} is not in the ledger and has no dead letter: not received "
                           "(yet), or sent without a readable match_id")
    led = record.ledger
    return cached(request, models.MatchStatus(
        match_id=match_id, status=_status(record), ladder=led.ladder if led else None,
        finished_at=led.finished_at if led else None, applied_at=led.applied_at if led else None,
        policy_version=led.policy_version if led else None, placed_at_end=led.placed_at_end if led else None,
        redeliveries=led.redeliveries if led else 0,
        changes=[models.RatingChange(**c._asdict(), delta=c.rating_after - c.rating_before) for c in record.changes],
        annulment=models.AnnulmentInfo(**record.annulment._asdict()) if record.annulment else None,
        duplicate_deliveries=record.duplicates,
        dead_letters=[models.DeadLetterInfo(**d._asdict()) for d in record.dead_letters]))


@router.post("/ladders/{ladder}/predictions", response_model=models.PredictionResponse,
             responses=problem_responses(400, 404, 422, 503),
             summary="Win probabilities and quality of a proposed match")
def predictions(request: Request, ladder: LADDER,
                body: Annotated[models.PredictionRequest, Body()]) -> models.PredictionResponse:
    """Each side's win probability, the draw probability (null where the model has none) and the
    match quality of a proposed match, from the players' stored states on the ladder with their
    deviations grown to ``at`` (default now), as ``ratings predict``; a player with no state starts
    from the policy's initial state and is named in ``unknown_players``. 422 ``invalid_sides`` for a
    player on two sides."""
    at = body.at or datetime.now(UTC)
    if at.tzinfo is None:
        raise ProblemError(422, "invalid_request", "Invalid request",
                           "at: give a UTC offset (e.g. 2026-05-01T18:00:00Z)")
    asked = [p for side in body.sides for p in side]
    with reading(request) as conn:
        policy, _ = _policy(conn, ladder)
        states = read_models.player_states(conn, ladder, asked)
    try:
        result = standings.prediction(body.sides, states, policy, at.timestamp())
    except ValueError as exc:
        raise ProblemError(422, "invalid_sides", "Invalid sides", str(exc)) from exc
    model = "elo" if isinstance(policy, RatingPolicy) else policy.model
    return models.PredictionResponse(
        ladder=ladder, model=model, at=at, sides=body.sides, win_probabilities=list(result.win_probabilities),
        draw_probability=result.draw_probability, quality=result.quality,
        unknown_players=list(dict.fromkeys(p for p in asked if p not in states)))
