"""International football results (martj42/international_results) as MatchFinished messages."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from schemas import MatchFinished

DEFAULT_RESULTS = Path(__file__).resolve().parents[2] / "tests" / "data" / "international-football" / "results.csv"
"""The repository's copy, ``tests/data/international-football/results.csv`` (CC0; ``tests/data/README.md``)."""


def football_matches(
    path: Path = DEFAULT_RESULTS, ladder: str = "elo", limit: int | None = None
) -> Iterator[MatchFinished]:
    """One MatchFinished per row of ``results.csv``, in file order (sorted by date).

    ``match_id`` is ``football:<date>:<home>:<away>`` (with ``:2`` for a second meeting on the same
    day, which the file has once); ``finished_at`` is the date at 00:00 UTC; the home team is
    side A, and plays at home (``home``) unless the ground is neutral; ``score`` is the goals;
    ``season`` is the calendar year; the outcome comes from the score (extra time included,
    shoot-outs not). Raises
    ``FileNotFoundError`` if the file is missing and ``ValueError`` on a malformed row.
    """
    seen: Counter[str] = Counter()
    with open(path, newline="", encoding="utf-8-sig") as f:  # a BOM (Excel) is not part of "date"
        for i, row in enumerate(csv.DictReader(f)):
            if limit is not None and i >= limit:
                return
            home, away = row["home_team"], row["away_team"]
            home_score, away_score = int(row["home_score"]), int(row["away_score"])
            key = f"football:{row['date']}:{home}:{away}"
            seen[key] += 1
            match_id = key if seen[key] == 1 else f"{key}:{seen[key]}"
            outcome = "side_a_won" if home_score > away_score else "side_b_won" if home_score < away_score else "draw"
            yield MatchFinished(
                schema_version=1,
                match_id=match_id,
                ladder=ladder,
                finished_at=datetime.fromisoformat(row["date"]).replace(tzinfo=UTC),
                side_a={"players": [{"player_id": home}]},
                side_b={"players": [{"player_id": away}]},
                outcome=outcome,
                home=None if row["neutral"].strip().upper() == "TRUE" else "side_a",
                score={"side_a": home_score, "side_b": away_score},
                season=row["date"][:4],
            )
