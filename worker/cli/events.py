"""``ratings events read|snapshot`` (the consumers' backfill read path, JSON Lines) and ``ratings outbox prune``."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from worker.cli.common import console, open_database, require_known_ladder
from worker.settings import get_settings
from worker.store.event_log import prune_outbox, read_events, read_snapshot

events_app = typer.Typer(help="Read rating-changed events from the database (consumers' backfill), as JSON Lines.",
                         no_args_is_help=True)
outbox_app = typer.Typer(help="Outbox retention.", no_args_is_help=True)

LadderOpt = Annotated[Optional[str], typer.Option("--ladder", help="Only this ladder.")]
PlayerOpt = Annotated[Optional[str], typer.Option("--player", help="Only this player id.")]


def _write(rows) -> int:
    n = 0
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False, default=str) + "\n")
        n += 1
    out.flush()
    return n


@events_app.command("read")
def events_read(
    ladder: LadderOpt = None,
    player: PlayerOpt = None,
    after_sequence: Annotated[int, typer.Option("--after-sequence", min=0, help="Only events with a larger per-player sequence.")] = 0,
) -> None:
    """Print the RatingChanged events the outbox keeps, one JSON object a line, each player's in sequence order.

    Events older than the retention (RATINGS_OUTBOX_RETENTION_DAYS) are pruned: when the first sequence
    printed for a player is above --after-sequence + 1, take `ratings events snapshot` for that player.
    An unknown --ladder exits 2.
    """
    if ladder is not None:
        require_known_ladder(ladder)
    with open_database(autocommit=True) as conn:
        _write(read_events(conn, ladder, player, after_sequence))


@events_app.command("snapshot")
def events_snapshot(ladder: LadderOpt = None, player: PlayerOpt = None) -> None:
    """Print each player's current rating and last event sequence, one JSON object a line
    (ladder, player_id, rating, games_played, sequence). An unknown --ladder exits 2."""
    if ladder is not None:
        require_known_ladder(ladder)
    with open_database(autocommit=True) as conn:
        _write(read_snapshot(conn, ladder, player))


@outbox_app.command("prune")
def outbox_prune(
    older_than_days: Annotated[Optional[float], typer.Option("--older-than-days", min=0, help="Default: RATINGS_OUTBOX_RETENTION_DAYS.")] = None,
) -> None:
    """Delete published outbox events older than the retention (never unpublished ones)."""
    days = get_settings().outbox_retention_days if older_than_days is None else older_than_days
    with open_database(autocommit=True) as conn:
        n = prune_outbox(conn, days * 86400.0)
    console.print(f"pruned {n} published events older than {days:g} days")
