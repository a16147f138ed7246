"""Replay a published rating table with a policy and compare: ``ratings check-published``.

The table is FiveThirtyEight's ``nfl_games.csv`` layout (``date, season, neutral, playoff, team1,
team2, elo1, elo2, elo_prob1, score1, score2, result1``): one row per game with the published
pre-game ratings of both teams and team1's win probability. Each game becomes an engine
:class:`engine.Match` (team1 = side A, at home unless ``neutral`` is 1; ``season`` and the score
passed on), the games are folded through :func:`engine.replay.replay_changes` in file order, and
each replayed pre-game rating and expected score is compared with the published one.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine import Match, Outcome, Participant, RatingPolicy
from engine.replay import replay_changes

_OUTCOMES = {"1": Outcome.SIDE_A_WON, "1.0": Outcome.SIDE_A_WON, "0": Outcome.SIDE_B_WON,
             "0.0": Outcome.SIDE_B_WON, "0.5": Outcome.DRAW}


@dataclass
class PublishedCheck:
    """Largest differences between replayed and published figures over ``games`` rows.

    ``max_rating_diff`` in rating points (over elo1 and elo2), ``max_prob_diff`` in probability;
    ``worst_rating`` / ``worst_prob`` describe where each was seen (row number, date, teams).
    ``over_rating_tolerance`` / ``over_prob_tolerance`` count rows beyond the tolerances given.
    """

    games: int = 0
    max_rating_diff: float = 0.0
    max_prob_diff: float = 0.0
    worst_rating: str = ""
    worst_prob: str = ""
    over_rating_tolerance: int = 0
    over_prob_tolerance: int = 0
    first_failures: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        """True when no row is beyond either tolerance."""
        return self.over_rating_tolerance == 0 and self.over_prob_tolerance == 0


def read_games(path: Path) -> Iterator[tuple[dict[str, str], Match]]:
    """``(row, match)`` per game of a FiveThirtyEight-style CSV, in file order.

    Raises ``ValueError`` naming the row for a missing column or an unreadable result or score.
    """
    with open(path, newline="", encoding="utf-8-sig") as handle:  # a BOM (Excel) is not part of "date"
        for number, row in enumerate(csv.DictReader(handle), start=2):
            try:
                outcome = _OUTCOMES[row["result1"].strip()]
                match = Match(
                    match_id=f"{row['date']}-{row['team1']}-{row['team2']}",
                    side_a=(Participant(row["team1"]),),
                    side_b=(Participant(row["team2"]),),
                    outcome=outcome,
                    home=None if row["neutral"].strip() == "1" else "side_a",
                    scores=(float(row["score1"]), float(row["score2"])),
                    season=row["season"].strip(),
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: cannot read the game: {exc!r}") from exc
            yield row, match


def check_published(
    path: Path, policy: RatingPolicy, rating_tolerance: float = 0.01, prob_tolerance: float = 1e-4
) -> PublishedCheck:
    """Replay the games of ``path`` under ``policy`` and compare with the published figures.

    Returns a :class:`PublishedCheck`; raises ``ValueError`` for an unreadable row.
    """
    check = PublishedCheck()
    rows: list[dict[str, str]] = []

    def matches() -> Iterator[Match]:
        for row, match in read_games(path):
            rows.append(row)
            yield match

    for number, (_match, changes) in enumerate(replay_changes(matches(), policy), start=2):
        row = rows[-1]
        check.games += 1
        a, b = changes
        where = f"row {number} ({row['date']} {row['team1']}-{row['team2']})"
        rating_diff = max(abs(a.rating_before - float(row["elo1"])), abs(b.rating_before - float(row["elo2"])))
        prob_diff = abs(a.expected_score - float(row["elo_prob1"]))
        if rating_diff > check.max_rating_diff:
            check.max_rating_diff, check.worst_rating = rating_diff, where
        if prob_diff > check.max_prob_diff:
            check.max_prob_diff, check.worst_prob = prob_diff, where
        if rating_diff > rating_tolerance:
            check.over_rating_tolerance += 1
        if prob_diff > prob_tolerance:
            check.over_prob_tolerance += 1
        if (rating_diff > rating_tolerance or prob_diff > prob_tolerance) and len(check.first_failures) < 5:
            check.first_failures.append(
                f"{where}: replayed {a.rating_before:.3f}/{b.rating_before:.3f} p={a.expected_score:.6f}, "
                f"published {row['elo1']}/{row['elo2']} p={float(row['elo_prob1']):.6f}"
            )
    return check
