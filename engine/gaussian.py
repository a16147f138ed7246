"""The standard normal distribution and the truncated-normal functions V, W, V~ and W~ of
Weng and Lin, "A Bayesian Approximation Method for Online Ranking", JMLR 12 (2011), section 3
(TrueSkill's v and w): the Thurstone-Mosteller updates of :mod:`engine.weng_lin` and its
predictions. Standard library only; each function is careful in the far tails, where the direct
formulas lose every digit.
"""

from __future__ import annotations

import math

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def normal_cdf(x: float) -> float:
    """Phi(x), the standard normal cumulative distribution, from ``erfc`` (accurate in the lower
    tail, where ``1 + erf`` loses digits)."""
    return 0.5 * math.erfc(-x / _SQRT2)


def normal_pdf(x: float) -> float:
    """phi(x), the standard normal density."""
    return _INV_SQRT_2PI * math.exp(-0.5 * x * x)


def v(x: float, t: float) -> float:
    """The paper's V(x, t) = phi(x - t) / Phi(x - t) (Thurstone-Mosteller, a win; mean of a
    truncated normal). Where Phi(x - t) underflows to 0 (x - t < -38) it returns the asymptote
    -(x - t)."""
    xt = x - t
    denominator = normal_cdf(xt)
    if denominator == 0.0:
        return -xt
    return normal_pdf(xt) / denominator


def w(x: float, t: float) -> float:
    """The paper's W(x, t) = V(x, t) * (V(x, t) + x - t), in (0, 1) (Thurstone-Mosteller, a win;
    one minus the variance of a truncated normal). 1 where Phi(x - t) underflows."""
    xt = x - t
    if normal_cdf(xt) == 0.0:
        return 1.0
    value = v(x, t)
    return value * (value + xt)


def _draw_interval(x: float, t: float) -> tuple[float, float, float]:
    """(|x|, Phi(t - |x|) - Phi(-t - |x|), phi(-t - |x|) - phi(t - |x|)) for the draw functions,
    the difference of cumulatives taken from ``erfc`` so that it keeps its digits far in the tail."""
    xx = abs(x)
    b = 0.5 * (math.erfc((xx - t) / _SQRT2) - math.erfc((xx + t) / _SQRT2))
    a = normal_pdf(-t - xx) - normal_pdf(t - xx)
    return xx, b, a


def v_draw(x: float, t: float) -> float:
    """The paper's V~(x, t) (Thurstone-Mosteller, a draw): the mean of a standard normal truncated
    to [-t - |x|, t - |x|], with the sign of -x. Where that interval's probability underflows to 0
    it returns the asymptote -x + t (x > 0) or -x - t."""
    xx, b, a = _draw_interval(x, t)
    if b <= 0.0:
        return -x - t if x < 0 else -x + t
    return (-a if x < 0 else a) / b


def w_draw(x: float, t: float) -> float:
    """The paper's W~(x, t) (Thurstone-Mosteller, a draw): V~(x, t)^2 plus
    ((t - |x|) phi(t - |x|) + (t + |x|) phi(-t - |x|)) / (Phi(t - |x|) - Phi(-t - |x|)).
    1 where that probability underflows to 0."""
    xx, b, _ = _draw_interval(x, t)
    if b <= 0.0:
        return 1.0
    vd = v_draw(x, t)
    return ((t - xx) * normal_pdf(t - xx) + (t + xx) * normal_pdf(-t - xx)) / b + vd * vd
