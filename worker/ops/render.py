"""Rich tables of read models shared by the ``ratings`` commands and the demo (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table


def leaderboard_table(ladder: str, rows: Sequence[Mapping[str, Any]]) -> Table:
    """A rich table of leaderboard rows (:func:`worker.store.read_models.leaderboard`): rank, player,
    rating (one decimal), games, wins, draws, losses, win % (one decimal); titled ``ladder <ladder>``."""
    table = Table(title=f"ladder {ladder}")
    columns: list[tuple[str, JustifyMethod]] = [
        ("rank", "right"), ("player", "left"), ("rating", "right"), ("games", "right"), ("wins", "right"),
        ("draws", "right"), ("losses", "right"), ("win %", "right")]
    for col, just in columns:
        table.add_column(col, justify=just)
    for r in rows:
        table.add_row(str(r["rank"]), r["player_id"], f"{r['rating']:.1f}", str(r["games"]), str(r["wins"]),
                      str(r["draws"]), str(r["losses"]), f"{r['win_pct'] or 0:.1f}")
    return table
