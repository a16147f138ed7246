"""``ratings predict`` and the leaderboard of a ladder rated by a model with uncertainty."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, Optional

import typer
from rich.table import Table

from worker.cli.common import console, err, ladder_policies, open_database, require_known_ladder
from worker.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from worker.store.standings import BoardRow


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


class UncertaintyBoard(NamedTuple):
    """The leaderboard of a ladder rated with uncertainty: the policy's model and ``k`` of its
    conservative rating (rating - k x deviation), the moment shown (seconds since the epoch) and the
    rows (:class:`worker.store.standings.BoardRow`)."""

    model: str
    k: float
    at: float
    rows: list[BoardRow]


def _refuse_the_past(moment: float, states: dict[str, Any], shown: list[str], at: str | None) -> None:
    """Exit 2 when ``--at`` is before the latest stored match of a player ``shown``: the stored
    states are the ratings after every match, so an earlier moment would show today's ratings with
    only the deviations moved, never the ratings of that moment."""
    if at is None:
        return
    played = [(states[p].last_played, p) for p in shown if p in states and states[p].last_played is not None]
    if played and max(played)[0] > moment:
        last, who = max(played)
        when = datetime.fromtimestamp(last, UTC).isoformat()
        err.print(f"--at {at!r} is before the latest stored match of {who!r} ({when}) (at_before_latest_match): "
                  "ratings are stored after every match, not as of a past moment; give an --at at or after it")
        raise typer.Exit(ExitCode.USAGE)


def uncertainty_board(conn: Any, ladder: str, top: int | None, at: str | None) -> UncertaintyBoard | None:
    """The leaderboard of ``ladder`` at ``at`` (``--at``; now when ``None``) when a model with
    uncertainty rates it, else ``None``. Exits 2 on an ``--at`` that is not a date-time with offset."""
    from worker import store as repository
    from worker.policy.uncertainty import leaderboard_rules
    from worker.store.standings import board

    policy, content = _in_force(conn, ladder)
    rules = leaderboard_rules(policy, content)
    if rules is None:
        return None
    moment = _moment(at)
    states = repository.player_states(conn, ladder)
    rows = board(states, rules, moment, top)
    _refuse_the_past(moment, states, [r.player_id for r in rows], at)
    return UncertaintyBoard(policy.model, policy.conservative_k, moment, rows)


def board_dict(row: BoardRow) -> dict[str, Any]:
    """A leaderboard row of a ladder rated with uncertainty as ``--json`` and ``--csv`` give it:
    ``rank`` (``None`` when not rankable), ``player_id``, ``rating``, ``deviation`` (grown to the moment
    shown), ``conservative`` (what the rank is by), ``games``, ``provisional``, ``rankable``, ``inactive``."""
    from worker.store.standings import board_row_dict, marks

    return board_row_dict(row) | marks(row)


def uncertainty_table(ladder: str, shown: UncertaintyBoard) -> Table:
    """The leaderboard table of a ladder rated with uncertainty."""
    table = Table(title=f"ladder {ladder} ({shown.model}; ranked by rating - {shown.k:g} × deviation)")
    for col in ("rank", "player", "conservative", "rating", "± deviation", "games", "marks"):
        table.add_column(col, justify="left" if col in ("player", "marks") else "right")
    for r in shown.rows:
        marks = ", ".join(m for m, on in (("provisional", r.provisional), ("inactive", r.inactive)) if on)
        table.add_row("-" if r.rank is None else str(r.rank), r.player_id, f"{r.conservative:.1f}",
                      f"{r.rating:.1f}", f"{r.deviation:.1f}", str(r.games), marks)
    return table


def _require_rated_shape(ladder: str, sides: list[list[str]]) -> None:
    """Exit 2 (``unsupported_match_shape``) when the ladder does not rate a match of these sides'
    sizes (its ``match_shapes`` in the ladders file): it would never rate the match predicted."""
    from worker.policy.shapes import REASON_CODE

    shapes = ladder_policies()[ladder].shapes
    refusal = None if shapes is None or len(sides) < 2 or not all(sides) else shapes.refusal([len(s) for s in sides], ladder)
    if refusal is not None:
        err.print(f"cannot predict ({REASON_CODE}): {refusal.split('. Fix:')[0]}", markup=False)
        raise typer.Exit(ExitCode.USAGE)


def predict(
    ladder: Annotated[str, typer.Argument(help="Ladder name.")],
    side: Annotated[list[str], typer.Option("--side", help="A side's player ids, comma-separated; give it "
                                            "once per side (at least two).")],
    at: Annotated[Optional[str], typer.Option(help="The moment of the match (ISO 8601 with offset; "
                                              "default now): deviations grow to it. Not before a "
                                              "player's latest stored match (exit 2).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on standard output.")] = False,
) -> None:
    """Win probability of each side (they sum to 1), draw probability (where the model has one: a
    separate figure, not part of that sum) and match quality of
    a proposed match between players of a ladder, from their stored ratings (a player without one
    starts from the ladder's initial rating)."""
    from worker import store as repository
    from worker.store.standings import prediction, prediction_dict

    require_known_ladder(ladder)
    sides = [[p.strip() for p in s.split(",") if p.strip()] for s in side]
    _require_rated_shape(ladder, sides)
    with open_database() as conn:
        policy, _ = _in_force(conn, ladder)
        states = repository.player_states(conn, ladder, [p for s in sides for p in s])
    moment = _moment(at)
    _refuse_the_past(moment, states, [p for s in sides for p in s], at)
    try:
        result = prediction(sides, states, policy, moment)
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
        else f"{result.draw_probability:.4f} (separate: the win probabilities above sum to 1 without it)"
    console.print(f"draw probability: {draw}")
    console.print(f"match quality: {result.quality:.4f}")
