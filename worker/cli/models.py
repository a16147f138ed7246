"""``ratings predict`` and the leaderboard of a ladder rated by a model with uncertainty."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from worker.cli.common import console, err, ladder_policies, open_database, require_known_ladder
from worker.cli.exit_codes import ExitCode


def _in_force(conn: Any, ladder: str) -> tuple[Any, dict[str, Any] | None]:
    """The ladder's policy in force (recorded in ``ladders``, else the ladders file's) and its content."""
    from worker import store as repository
    from worker.store.policy_records import policy_content

    configured = ladder_policies()[ladder]
    record = repository.ladder_record(conn, ladder)
    if record is None or record.policy_version == configured.version:
        return configured.policy, configured.content
    return repository.stored_policy(conn, record.policy_version), policy_content(conn, record.policy_version)


def _moment(at: str | None) -> float:
    """``--at`` (an ISO 8601 date-time with offset) in seconds since the epoch; now when omitted."""
    if at is None:
        return time.time()
    try:
        moment = datetime.fromisoformat(at)
    except ValueError as exc:
        err.print(f"--at {at!r}: not an ISO 8601 date-time ({exc})")
        raise typer.Exit(ExitCode.USAGE) from exc
    if moment.tzinfo is None:
        err.print(f"--at {at!r}: give a UTC offset (e.g. 2026-05-01T18:00:00Z)")
        raise typer.Exit(ExitCode.USAGE)
    return moment.timestamp()


def uncertainty_rows(conn: Any, ladder: str, top: int | None, at: str | None) -> tuple[Any, list[Any]] | None:
    """The policy in force on ``ladder`` and its leaderboard rows
    (:class:`worker.store.standings.BoardRow`) at ``at`` when a model with uncertainty rates it, else ``None``."""
    from worker import store as repository
    from worker.policy.uncertainty import leaderboard_rules
    from worker.store.standings import board

    policy, content = _in_force(conn, ladder)
    rules = leaderboard_rules(policy, content)
    if rules is None:
        return None
    return policy, board(repository.player_states(conn, ladder), rules, _moment(at), top)


def uncertainty_leaderboard_json(conn: Any, ladder: str, top: int | None, at: str | None) -> dict[str, Any] | None:
    """``ratings leaderboard --json`` of ``ladder`` when a model with uncertainty rates it, else ``None``:
    the ladder, its model and the rows (rank ``null`` when not rankable), in the table's order."""
    from worker.store.standings import board_row_dict

    found = uncertainty_rows(conn, ladder, top, at)
    if found is None:
        return None
    policy, rows = found
    return {"ladder": ladder, "model": policy.model, "players": [board_row_dict(r) for r in rows]}


def uncertainty_leaderboard(conn: Any, ladder: str, top: int | None, at: str | None) -> Table | None:
    """The leaderboard table of ``ladder`` when a model with uncertainty rates it, else ``None``."""
    found = uncertainty_rows(conn, ladder, top, at)
    if found is None:
        return None
    policy, rows = found
    k = policy.conservative_k
    table = Table(title=f"ladder {ladder} ({policy.model}; ranked by rating - {k:g} × deviation)")
    for col in ("rank", "player", "conservative", "rating", "± deviation", "games", "marks"):
        table.add_column(col, justify="left" if col in ("player", "marks") else "right")
    for r in rows:
        marks = ", ".join(m for m, on in (("provisional", r.provisional), ("inactive", r.inactive)) if on)
        table.add_row("-" if r.rank is None else str(r.rank), r.player_id, f"{r.conservative:.1f}",
                      f"{r.rating:.1f}", f"{r.deviation:.1f}", str(r.games), marks)
    return table


def predict(
    ladder: Annotated[str, typer.Argument(help="Ladder name.")],
    side: Annotated[list[str], typer.Option("--side", help="A side's player ids, comma-separated; give it "
                                            "once per side (at least two).")],
    at: Annotated[Optional[str], typer.Option(help="The moment of the match (ISO 8601 with offset; "
                                              "default now): deviations grow to it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on standard output.")] = False,
) -> None:
    """Win probability of each side, draw probability (where the model has one) and match quality of
    a proposed match between players of a ladder, from their stored ratings (a player without one
    starts from the ladder's initial rating)."""
    from worker import store as repository
    from worker.store.standings import prediction, prediction_dict

    require_known_ladder(ladder)
    sides = [[p.strip() for p in s.split(",") if p.strip()] for s in side]
    with open_database() as conn:
        policy, _ = _in_force(conn, ladder)
        states = repository.player_states(conn, ladder, [p for s in sides for p in s])
    try:
        result = prediction(sides, states, policy, _moment(at))
    except ValueError as exc:
        err.print(f"cannot predict: {exc}")
        raise typer.Exit(ExitCode.USAGE) from exc
    if as_json:
        print(json.dumps(prediction_dict(sides, result)))
        return
    table = Table(title=f"ladder {ladder}: proposed match")
    table.add_column("side")
    table.add_column("players")
    table.add_column("win probability", justify="right")
    for n, (players, p) in enumerate(zip(sides, result.win_probabilities), 1):
        table.add_row(str(n), ", ".join(players), f"{p:.4f}")
    console.print(table)
    draw = "none (the model has no draw probability)" if result.draw_probability is None \
        else f"{result.draw_probability:.4f}"
    console.print(f"draw probability: {draw}")
    console.print(f"match quality: {result.quality:.4f}")
