"""``ratings evaluate``: the metrics, pure functions on numbers (log loss, Brier score, accuracy, distribution)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine import Outcome

PROBABILITY_CLIP = 1e-15
"""Expected scores are clipped to [1e-15, 1 − 1e-15] before the log loss (scikit-learn's default)."""

DEVIANCE_CLAMP = 0.01
"""Predictions are clamped to [0.01, 0.99] before the binomial deviance (Kaggle ChessRatings2; liglicko2)."""

FLAT_DRIFT = 0.01
"""A drift smaller than this (rating points) everywhere is drawn as flat, on a ±1 point axis."""

MAX_DRIFT_POINTS = 500
"""Upper bound on the points of a per-matches drift series chosen by :func:`drift_period`."""

DEFAULT_DRIFT_EVERY = 1000
"""Matches per point of the drift series when it is not per year."""

MIN_YEARS_FOR_YEARLY_DRIFT = 3
"""``drift_by="auto"`` draws the drift per calendar year when the history spans at least this many."""

SIDE_A_SCORE = {Outcome.SIDE_A_WON: 1.0, Outcome.DRAW: 0.5, Outcome.SIDE_B_WON: 0.0}
"""Side A's result as a score: win 1, draw 0.5, loss 0 (before any performance adjustment)."""


# ------------------------------------------------------------------------------------------------
# Metrics: pure functions on numbers
# ------------------------------------------------------------------------------------------------


def clip_probability(p: float, eps: float = PROBABILITY_CLIP) -> float:
    """``p`` clipped to ``[eps, 1 − eps]``, so that ``ln p`` and ``ln(1 − p)`` are finite."""
    return min(max(p, eps), 1.0 - eps)


def log_loss_term(expected: float, actual: float, eps: float = PROBABILITY_CLIP) -> float:
    """Log loss (natural log, nats) of one prediction: ``−[s·ln E + (1 − s)·ln(1 − E)]``.

    ``expected`` E is the predicted probability in [0, 1] that side A wins (its expected score),
    clipped to ``[eps, 1 − eps]``; ``actual`` s is side A's result, 1, 0.5 or 0. For a decisive
    match this is the binary cross-entropy (Good, "Rational decisions", J. R. Stat. Soc. B 14, 1952;
    the log loss of scikit-learn's ``log_loss``). A draw is a *soft label* s = 0.5, whose term is
    ``−½·ln(E·(1 − E))``: smallest (ln 2 ≈ 0.693) at E = ½. A coin flip (E = ½ always) scores ln 2
    whatever the results.
    """
    e = clip_probability(expected, eps)
    return -(actual * math.log(e) + (1.0 - actual) * math.log(1.0 - e))


def brier_term(expected: float, actual: float) -> float:
    """Brier score of one prediction: ``(E − s)²``, in [0, 1].

    G. W. Brier, "Verification of forecasts expressed in terms of probability", Monthly Weather
    Review 78 (1950): the mean squared difference between forecast probability and outcome. This is
    the one-probability (binary) form; Brier's two-category form is exactly twice it. A draw counts
    as s = 0.5. A coin flip (E = ½ always) scores 0.25 on decisive matches.
    """
    return (expected - actual) ** 2


def deviance_term(expected: float, actual: float, clamp: float = DEVIANCE_CLAMP) -> float:
    """Log10 binomial deviance of one prediction: ``−[s·log10 E + (1 − s)·log10(1 − E)]``.

    The metric of Kaggle's "Deloitte/FIDE Chess Rating Challenge" (ChessRatings2, 2011), which
    niklasf/liglicko2 uses to tune lichess's Glicko-2 (``liglicko2::deviance``): ``expected`` E, the
    predicted expected score of side A in [0, 1] made before the match, is clamped to ``[clamp,
    1 − clamp]`` ([0.01, 0.99]); ``actual`` s is side A's result, 1, 0.5 (a draw) or 0. The mean
    over matches is the figure reported; always predicting ½ scores log10 2 = 0.30103. Unitless.
    """
    e = min(max(expected, clamp), 1.0 - clamp)
    return -(actual * math.log10(e) + (1.0 - actual) * math.log10(1.0 - e))


def mean_log_loss(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Mean of :func:`log_loss_term` over ``(expected, actual)`` pairs; ``None`` when there is none."""
    terms = [log_loss_term(e, s) for e, s in predictions]
    return math.fsum(terms) / len(terms) if terms else None


def mean_brier_score(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Mean of :func:`brier_term` over ``(expected, actual)`` pairs; ``None`` when there is none."""
    terms = [brier_term(e, s) for e, s in predictions]
    return math.fsum(terms) / len(terms) if terms else None


def prediction_credit(expected: float, actual: float) -> float | None:
    """Whether the favourite won one match: 1 (yes), 0 (no), 0.5 (no favourite), ``None`` (a draw).

    The favourite is side A when E > ½ and side B when E < ½. A draw (s = ½) is not a decisive
    match and gets ``None``: draws are left out of the accuracy. With E exactly ½ (e.g. two new
    players) there is no favourite and the match counts half, the expected credit of a coin toss.
    """
    if actual == 0.5:
        return None
    if expected == 0.5:
        return 0.5
    return 1.0 if (expected > 0.5) == (actual == 1.0) else 0.0


def accuracy(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Share of decisive matches won by the favourite (:func:`prediction_credit`), in [0, 1].

    Draws are left out; a match with no favourite counts half. ``None`` when no match is decisive.
    """
    credits = [c for e, s in predictions if (c := prediction_credit(e, s)) is not None]
    return sum(credits) / len(credits) if credits else None


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 ≤ q ≤ 1) of ``sorted_values`` (ascending, not empty), linearly interpolated.

    Hyndman & Fan (1996), definition 7 (the default of R and NumPy): with h = (n − 1)·q, the value
    ``x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋ + 1] − x[⌊h⌋])``. Raises ``ValueError`` for an empty sequence or
    ``q`` outside [0, 1].
    """
    if not sorted_values:
        raise ValueError("the quantile of no values is undefined")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    if lo + 1 >= len(sorted_values):
        return float(sorted_values[-1])
    return sorted_values[lo] + (h - lo) * (sorted_values[lo + 1] - sorted_values[lo])


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean Σx / n and population standard deviation √(Σ(x − mean)² / n) of ``values`` (not empty).

    Two passes, each summed with :func:`math.fsum` (correctly rounded), so that a mean that stays
    put in exact arithmetic (a zero-sum policy) is not blurred by rounding noise. Raises
    ``ZeroDivisionError`` for an empty sequence.
    """
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in values) / n)


@dataclass(frozen=True)
class RatingDistribution:
    """Ratings of the players at one moment, in rating points.

    ``players`` is a count; ``std`` is the population standard deviation (divided by n, not n − 1);
    the percentiles are :func:`quantile` definition 7.
    """

    players: int
    mean: float
    std: float
    min: float
    p10: float
    p50: float
    p90: float
    max: float


def rating_distribution(ratings: Iterable[float]) -> RatingDistribution | None:
    """Count, mean, population standard deviation, min, p10, median, p90 and max of ``ratings``.

    Mean = Σr / n and std = √(Σ(r − mean)² / n), both summed with :func:`math.fsum`. ``None`` when
    ``ratings`` is empty.
    """
    values = sorted(ratings)
    n = len(values)
    if n == 0:
        return None
    mean, std = mean_and_std(values)
    return RatingDistribution(
        players=n, mean=mean, std=std, min=values[0], p10=quantile(values, 0.1), p50=quantile(values, 0.5),
        p90=quantile(values, 0.9), max=values[-1],
    )


