"""``ratings evaluate --models``: the shipped real-match data sets, as engine matches in order.

Two histories ship with the repository (``tests/data/README.md``): the international football
results (martj42/international_results, 49,520 matches) and FiveThirtyEight's NFL games
(fivethirtyeight/nfl-elo-game, 16,810 games, with their published pre-game win probability
``elo_prob1``). Each becomes a :class:`DataSet`: its matches in file order (the order they were
played), each with ``played_at`` at 00:00 UTC of its date, so that models whose deviation grows
with time see the days between matches. Each data set is split in two halves: the earlier
``matches[:split]`` (parameters are tuned on it) and the later ``matches[split:]`` (models are
scored on it, with ratings carried over from the earlier half).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine import Match
from worker.ops.evaluate.metrics import SIDE_A_SCORE

DATA_DIR = Path(__file__).resolve().parents[3] / "tests" / "data"
"""The repository's copies of the real-match data (``tests/data``)."""

FOOTBALL_RESULTS = DATA_DIR / "international-football" / "results.csv"
NFL_GAMES = DATA_DIR / "nfl-elo" / "nfl_games.csv"


@dataclass(frozen=True)
class DataSet:
    """A real history: ``matches`` (two-sided, in the order played, each with ``played_at``).

    ``name`` is short (``football``, ``nfl``); ``source`` says where it came from.
    ``published`` holds, when the source publishes one, its own prediction for each match (side
    A's win probability, e.g. FiveThirtyEight's ``elo_prob1``), aligned with ``matches``.
    """

    name: str
    source: str
    matches: tuple[Match, ...]
    published: tuple[float, ...] | None = None

    @property
    def split(self) -> int:
        """Index of the first match of the later half: ``len(matches) // 2``. The earlier half is
        ``matches[:split]``, the later ``matches[split:]`` (the larger half when the count is odd)."""
        return len(self.matches) // 2

    def actual(self, index: int) -> float:
        """Side A's result in match ``index``: 1 win, 0.5 draw, 0 loss."""
        return SIDE_A_SCORE[self.matches[index].outcome]


def _midnight_utc(date: str) -> float:
    """Seconds since the epoch of ``date`` (``YYYY-MM-DD``) at 00:00 UTC."""
    return datetime.fromisoformat(date).replace(tzinfo=UTC).timestamp()


def football_data(path: Path = FOOTBALL_RESULTS) -> DataSet:
    """The international football results as a :class:`DataSet`.

    Each row as :func:`worker.ops.football.football_matches` maps it (home team = side A, at home
    unless the ground is neutral, goals as the score, the calendar year as the season), with
    ``played_at`` from its date. Raises ``FileNotFoundError`` or ``ValueError`` (a malformed row).
    """
    from worker.ops.evaluate.sources import football_history

    matches = []
    for item in football_history(path):
        match = item.match
        if not isinstance(match, Match) or item.finished_at is None:
            raise ValueError(f"{path}: {match.match_id} is not a dated two-sided match")
        matches.append(dataclasses.replace(match, played_at=item.finished_at.timestamp()))
    return DataSet("football", f"{path.name} (international football, {len(matches):,} matches)", tuple(matches))


def nfl_data(path: Path = NFL_GAMES) -> DataSet:
    """FiveThirtyEight's NFL games as a :class:`DataSet` with their ``elo_prob1`` as ``published``.

    Each game as :func:`worker.ops.published.read_games` maps it (team1 = side A, at home unless
    ``neutral``, the score, the season), with ``played_at`` from its date. Raises
    ``FileNotFoundError`` or ``ValueError`` naming an unreadable row.
    """
    from worker.ops.published import read_games

    matches = []
    published = []
    for row, match in read_games(path):
        try:
            probability = float(row["elo_prob1"])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path}: {match.match_id}: no elo_prob1: {exc!r}") from exc
        matches.append(dataclasses.replace(match, played_at=_midnight_utc(row["date"])))
        published.append(probability)
    return DataSet("nfl", f"{path.name} (FiveThirtyEight NFL, {len(matches):,} games)", tuple(matches),
                   tuple(published))
