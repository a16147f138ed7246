"""``ratings evaluate``: the run, every policy replayed in step over one history."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from worker.ops.evaluate.accumulate import DriftPoint, HistoryItem, LabelledPolicy, PolicyEvaluation, PolicyReport
from worker.ops.evaluate.metrics import DEFAULT_DRIFT_EVERY, MAX_DRIFT_POINTS, MIN_YEARS_FOR_YEARLY_DRIFT

# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------


@dataclass
class EvaluationReport:
    """The result of :func:`evaluate`: one :class:`PolicyReport` per policy, in the order given.

    ``drift_by`` is ``"year"`` or ``"matches"`` (the series kept in each policy report);
    ``first``/``last`` the earliest and latest ``finished_at`` seen; ``seconds`` the wall time.
    """

    source: str
    matches: int
    skip_first: int
    drift_by: str
    drift_every: int
    policies: list[PolicyReport]
    first: datetime | None = None
    last: datetime | None = None
    seconds: float = 0.0
    skipped: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, the per-policy shares added, datetimes as ISO 8601."""
        policies = []
        for p in self.policies:
            d = asdict(p)
            d["floor_share"] = p.floor_share
            d["cap_share"] = p.cap_share
            policies.append(d)
        return {
            "source": self.source,
            "matches": self.matches,
            "skip_first": self.skip_first,
            "drift_by": self.drift_by,
            "drift_every": self.drift_every if self.drift_by == "matches" else None,
            "first_finished_at": self.first.isoformat() if self.first else None,
            "last_finished_at": self.last.isoformat() if self.last else None,
            "seconds": self.seconds,
            "skipped": self.skipped,
            "definitions": DEFINITIONS,
            "policies": policies,
        }


DEFINITIONS = {
    "expected": "E: side A's expected score before the match (the engine's prediction that side A wins)",
    "actual": "s: side A's result, 1 win / 0.5 draw / 0 loss (before any performance adjustment)",
    "log_loss": "mean of -[s ln E + (1-s) ln(1-E)], E clipped to [1e-15, 1-1e-15]; a draw is the soft label "
                "s = 0.5; natural log",
    "brier": "mean of (E - s)^2 (Brier 1950, binary form); a draw is s = 0.5",
    "accuracy": "share of decisive matches (draws left out) won by the side with E > 0.5; E = 0.5 counts half",
    "skip_first": "the first N matches are replayed but left out of log loss, Brier and accuracy (burn-in)",
    "mean_rating": "mean rating of every player rated so far; drift = mean - the policy's initial rating",
    "floor_share": "share of matches in which at least one player's rating hit the policy's floor",
    "cap_share": "share of matches whose expected score used a capped rating difference (400-point rule)",
    "distribution": "ratings of every player at the end: population std, percentiles by linear interpolation "
                    "(Hyndman-Fan 7)",
}


def drift_period(total_matches: int | None, every: int = DEFAULT_DRIFT_EVERY) -> int:
    """Matches per drift point: ``every``, made larger for a long history so that the series has at
    most :data:`MAX_DRIFT_POINTS` points (each point costs a pass over every player)."""
    if total_matches is None:
        return every
    return max(every, math.ceil(total_matches / MAX_DRIFT_POINTS))


def evaluate(
    history: Iterable[HistoryItem],
    policies: Sequence[LabelledPolicy],
    *,
    source: str = "",
    skip_first: int = 0,
    drift_by: str = "auto",
    drift_every: int = DEFAULT_DRIFT_EVERY,
    player: str | None = None,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> EvaluationReport:
    """Replay ``history`` (matches in apply order) under every policy of ``policies`` and report.

    All policies are fed the same match before the next is read, so ``history`` may be a stream
    (a server-side cursor) read once. ``skip_first`` (a count of matches, ≥ 0) leaves the first
    matches out of the prediction figures; ``drift_by`` is ``"year"``, ``"matches"`` (every
    ``drift_every`` matches) or ``"auto"`` (per year when the matches' ``finished_at`` span at
    least :data:`MIN_YEARS_FOR_YEARLY_DRIFT` calendar years, else per matches); ``player`` is a
    player id whose rating is followed. ``progress`` is called with the number of matches read
    since its last call (every 1,000 matches and at the end). ``clock`` (seconds, e.g.
    :func:`time.perf_counter`) times the run. Raises ``ValueError`` for a bad argument, and passes
    on what the history or the engine raises.
    """
    _check_arguments(policies, skip_first, drift_by, drift_every)
    started = clock() if clock else 0.0
    evaluations = [PolicyEvaluation(lp, skip_first, player) for lp in policies]
    # Both drift series are kept during the run (they are small); one is chosen at the end.
    yearly: list[list[DriftPoint]] = [[] for _ in policies]
    every_n: list[list[DriftPoint]] = [[] for _ in policies]

    def snapshot(into: list[list[DriftPoint]], period: str) -> None:
        for ev, series in zip(evaluations, into):
            point = ev.snapshot(period)
            if point is not None:
                series.append(point)

    year: int | None = None  # running maximum: an out-of-order match counts in the current year
    first = last = None
    n = pending = 0
    for item in history:
        at = item.finished_at
        if at is not None:
            if year is not None and at.year > year:
                snapshot(yearly, str(year))
            if year is None or at.year > year:
                year = at.year
            first = at if first is None or at < first else first
            last = at if last is None or at > last else last
        for ev in evaluations:
            ev.observe(item)
        n += 1
        if n % drift_every == 0:
            snapshot(every_n, str(n))
        pending += 1
        if progress is not None and pending == 1000:
            progress(pending)
            pending = 0
    if progress is not None and pending:
        progress(pending)
    if year is not None:
        snapshot(yearly, str(year))
    if n % drift_every:
        snapshot(every_n, str(n))
    drift_by = _drift_series(drift_by, first, last)
    chosen = yearly if drift_by == "year" else every_n
    reports = [ev.report(series) for ev, series in zip(evaluations, chosen)]
    seconds = (clock() - started) if clock else 0.0
    return EvaluationReport(
        source=source, matches=n, skip_first=skip_first, drift_by=drift_by, drift_every=drift_every,
        policies=reports, first=first, last=last, seconds=seconds,
    )


def _check_arguments(policies: Sequence[LabelledPolicy], skip_first: int, drift_by: str, drift_every: int) -> None:
    """Raise ``ValueError`` naming the argument of :func:`evaluate` that is out of its range."""
    if drift_by not in ("auto", "year", "matches"):
        raise ValueError(f"drift_by must be auto, year or matches, got {drift_by!r}")
    if drift_every < 1 or skip_first < 0:
        raise ValueError("drift_every must be ≥ 1 and skip_first ≥ 0")
    if not policies:
        raise ValueError("no policy to evaluate")


def _drift_series(drift_by: str, first: datetime | None, last: datetime | None) -> str:
    """``"year"`` or ``"matches"``: ``drift_by`` itself, or for ``"auto"`` per year when the
    matches span at least :data:`MIN_YEARS_FOR_YEARLY_DRIFT` calendar years. Raises
    ``ValueError`` for drift per year over matches without a ``finished_at`` (``first`` is None)."""
    if drift_by == "auto":
        span = (last.year - first.year + 1) if first and last else 0
        drift_by = "year" if span >= MIN_YEARS_FOR_YEARLY_DRIFT else "matches"
    if drift_by == "year" and first is None:
        raise ValueError("drift per year needs matches with a finished_at")
    return drift_by
