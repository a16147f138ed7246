"""``ratings evaluate --models``: the prediction scores of one model over a stretch of matches."""

from __future__ import annotations

from dataclasses import dataclass

from worker.ops.evaluate.accumulate import RunningSum
from worker.ops.evaluate.metrics import brier_term, deviance_term, log_loss_term

CALIBRATION_BINS = 10
"""Bins of equal width over the predicted expected score [0, 1] in a calibration table."""


@dataclass(frozen=True)
class CalibrationBin:
    """Predictions whose expected score E fell in ``[low, high)`` (the last bin includes 1).

    ``count`` matches; ``mean_expected`` their mean E; ``mean_actual`` their mean result s (side A:
    1 win, 0.5 draw, 0 loss). A calibrated model has ``mean_actual`` close to ``mean_expected`` in
    every bin. Both means are ``None`` for an empty bin.
    """

    low: float
    high: float
    count: int
    mean_expected: float | None
    mean_actual: float | None


@dataclass(frozen=True)
class Scores:
    """The mean scores of ``matches`` predictions (each made before its match was rated).

    ``deviance``: mean log10 binomial deviance, E clamped to [0.01, 0.99] (:func:`deviance_term`);
    ``log_loss``: mean log loss in nats (:func:`log_loss_term`); ``brier``: mean Brier score
    (:func:`brier_term`); lower is better for all three. ``calibration``: one
    :class:`CalibrationBin` per tenth of E. Draws count as s = 0.5 everywhere.
    """

    matches: int
    deviance: float
    log_loss: float
    brier: float
    calibration: tuple[CalibrationBin, ...]


class Scorecard:
    """Accumulates the predictions of one model: :meth:`add` each ``(E, s)``, then :meth:`scores`.

    Sums are exact (:class:`RunningSum`), so the figures do not depend on the length of the run.
    """

    __slots__ = ("_deviance", "_log_loss", "_brier", "_bin_counts", "_bin_expected", "_bin_actual")

    def __init__(self) -> None:
        self._deviance = RunningSum()
        self._log_loss = RunningSum()
        self._brier = RunningSum()
        self._bin_counts = [0] * CALIBRATION_BINS
        self._bin_expected = [0.0] * CALIBRATION_BINS
        self._bin_actual = [0.0] * CALIBRATION_BINS

    def add(self, expected: float, actual: float) -> None:
        """Count one prediction: ``expected`` E in [0, 1] that side A wins (its expected score),
        ``actual`` s side A's result (1, 0.5 or 0). Raises ``ValueError`` for an E outside [0, 1]
        or not a number."""
        if not 0.0 <= expected <= 1.0:
            raise ValueError(f"an expected score lies in [0, 1], got {expected!r}")
        self._deviance.add(deviance_term(expected, actual))
        self._log_loss.add(log_loss_term(expected, actual))
        self._brier.add(brier_term(expected, actual))
        b = min(int(expected * CALIBRATION_BINS), CALIBRATION_BINS - 1)
        self._bin_counts[b] += 1
        self._bin_expected[b] += expected
        self._bin_actual[b] += actual

    @property
    def count(self) -> int:
        """Predictions added so far."""
        return self._deviance.count

    def deviance(self) -> float | None:
        """Mean log10 deviance so far, or ``None`` before the first prediction."""
        return self._deviance.mean()

    def scores(self) -> Scores:
        """The :class:`Scores` of every prediction added. Raises ``ValueError`` when none was."""
        if not self.count:
            raise ValueError("no prediction was scored")
        bins = []
        for b, n in enumerate(self._bin_counts):
            bins.append(CalibrationBin(
                low=b / CALIBRATION_BINS, high=(b + 1) / CALIBRATION_BINS, count=n,
                mean_expected=self._bin_expected[b] / n if n else None,
                mean_actual=self._bin_actual[b] / n if n else None,
            ))
        return Scores(
            matches=self.count, deviance=self._deviance.mean() or 0.0, log_loss=self._log_loss.mean() or 0.0,
            brier=self._brier.mean() or 0.0, calibration=tuple(bins),
        )
