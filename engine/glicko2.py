"""Glicko-2: the rating-period update and a ladder policy that rates each match as its own period.

Source of the formulas: Mark E. Glickman, "Example of the Glicko-2 system" (glicko.net, revision of
2022), steps 1 to 8; the 2022 revision's step 5.4 tests ``f(C) * f(B) <= 0`` (earlier revisions had
``< 0``). :func:`rate_period` is the paper's update, written from the paper.

The service rates per match as lichess does: each match is one rating period, and between two of a
player's matches the deviation grows with the time that passed, in fractional rating periods
(``periods_per_day``), by the paper's step 6 formula ``φ* = sqrt(φ² + t σ²)`` with ``t`` periods.
The time is the matches' own ``played_at`` (their order key), never a worker's clock, so a
chronological replay gives the same numbers bit for bit.

Sides of several players (teams, free-for-all) are rated against a *composite opponent*: each player
keeps their own rating, deviation and volatility and plays one game, in a rating period of their own,
against each other side, represented by that side's mean rating and the root mean square of its
deviations. Partial play (a participant's ``weight`` w in (0, 1]) counts the match as w of a game:
each game's terms in the paper's ``v`` and ``Δ`` sums are multiplied by w, so w = 1 is the paper's
update and the change goes to 0 with w.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.model import FreeForAll, Match, Outcome, Participant, PlayerState, RatingChange
from engine.predict import Prediction, check_sides, from_pairwise
from engine.rating import UnratableMatch

SCALE = 173.7178
"""Glicko-2 scale factor (the paper's step 2): ``μ = (r - 1500) / 173.7178``, ``φ = RD / 173.7178``."""

CENTRE = 1500.0
"""The Glicko rating that is μ = 0 on the Glicko-2 scale (the paper's step 2)."""

SECONDS_PER_DAY = 86_400.0

MAX_ITERATIONS = 1000
"""Iterations of the paper's step 5.4 before :class:`ArithmeticError` (the Illinois method converges
in a handful for every input the policy's bounds allow; lichess stops at the same count)."""

_PI_SQUARED = math.pi * math.pi


def _g(phi: float) -> float:
    """The paper's g(φ) (step 3): the weight a result gets from the opponent's deviation φ."""
    return 1.0 / math.sqrt(1.0 + 3.0 * phi * phi / _PI_SQUARED)


def _finish(
    phi: float, sigma: float, v: float, improvement: float, tau: float, epsilon: float, periods: float
) -> tuple[float, float, float]:
    """Steps 5 to 7 on the Glicko-2 scale, from step 3's ``v`` and the sum ``Σ w g (s - E)`` of step
    4: ``(μ' - μ, φ', σ')`` (the change rather than μ', so that a rating is updated as
    ``r + 173.7178 (μ' - μ)`` without a round trip through the Glicko-2 scale losing its low bits).
    Step 5 is the Illinois method on ``f(x) = e^x (Δ² - φ² - v - e^x) / (2 (φ² + v + e^x)²) -
    (x - a) / τ²``, to ``epsilon`` on ln σ², with ``f(C) f(B) <= 0`` (2022).

    ``f`` is written out at each use rather than called: the engine's speed target is for this
    loop, and a Python call per evaluation costs a third of it. Raises :class:`ArithmeticError` after
    :data:`MAX_ITERATIONS` iterations."""
    exp = math.exp
    delta = v * improvement
    sigma2 = sigma * sigma
    a = math.log(sigma2)
    phi2 = phi * phi
    tau2 = tau * tau
    rest = delta * delta - phi2 - v
    spread = phi2 + v
    big_a = a
    # the paper's test is Δ² > φ² + v; its difference tested instead, so that the logarithm is
    # always of a positive number when the two are within a rounding of each other
    if rest > 0:
        big_b = math.log(rest)
    else:
        k = 1
        while True:
            x = a - k * tau
            ex = exp(x)
            d = spread + ex
            if ex * (rest - ex) / (2.0 * d * d) - (x - a) / tau2 >= 0:
                break
            k += 1
        big_b = x
    d = spread + sigma2  # f(a), with e^a = σ² and a - a = 0
    f_a = sigma2 * (rest - sigma2) / (2.0 * d * d)
    ex = exp(big_b)
    d = spread + ex
    f_b = ex * (rest - ex) / (2.0 * d * d) - (big_b - a) / tau2
    iterations = 0
    while abs(big_b - big_a) > epsilon:
        iterations += 1
        if iterations > MAX_ITERATIONS:
            raise ArithmeticError(f"Glicko-2 volatility did not converge in {MAX_ITERATIONS} iterations")
        big_c = big_a + (big_a - big_b) * f_a / (f_b - f_a)
        ex = exp(big_c)
        d = spread + ex
        f_c = ex * (rest - ex) / (2.0 * d * d) - (big_c - a) / tau2
        if f_c * f_b <= 0:  # the 2022 revision's <=
            big_a = big_b
            f_a = f_b
        else:
            f_a = f_a / 2.0
        big_b = big_c
        f_b = f_c
    sigma_new = exp(big_a / 2.0)
    phi_star = math.sqrt(phi2 + periods * sigma_new * sigma_new)
    phi_new = 1.0 / math.sqrt(1.0 / (phi_star * phi_star) + 1.0 / v)
    return phi_new * phi_new * improvement, phi_new, sigma_new


def _period(
    mu: float,
    phi: float,
    sigma: float,
    games: Sequence[tuple[float, float, float]],
    weight: float,
    tau: float,
    epsilon: float,
    periods: float,
) -> tuple[float, float, float, float, float]:
    """Steps 3 to 7 on the Glicko-2 scale: ``(μ' - μ, φ', σ', Σ E, Σ g)`` from ``(μ, φ, σ)`` and
    ``games`` of ``(μ_j, φ_j, s_j)``, each counted ``weight`` times; ``periods`` rating periods of
    step 6 growth (1 in the paper). The sums of the expected scores and of g come along for the
    policy's :class:`engine.model.RatingChange`. No games: only the growth (the paper's inactive
    player)."""
    if not games:
        return 0.0, math.sqrt(phi * phi + periods * sigma * sigma), sigma, 0.0, 0.0
    information = 0.0
    improvement = 0.0
    expected = 0.0
    g_total = 0.0
    for mu_j, phi_j, score in games:
        g = 1.0 / math.sqrt(1.0 + 3.0 * phi_j * phi_j / _PI_SQUARED)
        try:
            e = 1.0 / (1.0 + math.exp(-g * (mu - mu_j)))
        except OverflowError:  # e^x beyond the largest double: the expected score is 0
            e = 0.0
        information += weight * g * g * e * (1.0 - e)
        improvement += weight * g * (score - e)
        expected += e
        g_total += g
    if information == 0.0:
        # every expected score is exactly 0 or 1 in double precision (ratings some 6,400 points
        # apart): step 3's v is infinite and the paper's update undefined
        raise UnratableMatch("unsupported_match", "the ratings are too far apart for a Glicko-2 update "
                             "(an expected score of exactly 0 or 1)")
    return (*_finish(phi, sigma, 1.0 / information, improvement, tau, epsilon, periods), expected, g_total)


def rate_period(
    rating: float,
    deviation: float,
    volatility: float,
    results: Sequence[tuple[float, float, float]],
    tau: float,
    epsilon: float = 1e-6,
    *,
    periods: float = 1.0,
    weight: float = 1.0,
) -> tuple[float, float, float]:
    """One player's Glicko-2 update over one rating period (Glickman, "Example of the Glicko-2
    system", 2022 revision, steps 1-8).

    ``rating`` and ``deviation`` (RD) in Glicko rating points, ``volatility`` σ (> 0, Glicko-2 scale);
    ``results`` a sequence of ``(opponent rating, opponent deviation, score)`` with scores in [0, 1]
    (1 win, 0.5 draw, 0 loss); ``tau`` the system constant τ (> 0; the paper suggests 0.3 to 1.2);
    ``epsilon`` the convergence tolerance of step 5.4. Keyword extensions, each the paper at its
    default: ``periods`` the rating periods of deviation growth in step 6 (``φ* = sqrt(φ² + periods
    σ'²)``; fractional allowed, ≥ 0); ``weight`` in (0, 1] the share of each game the player took part
    in (each game's terms of v and Δ scaled by it). Empty ``results``: rating and volatility
    unchanged, deviation grown by step 6 with the old volatility.

    Returns ``(rating, deviation, volatility)`` after the period. Raises ``ValueError`` for a
    non-finite input, a deviation, volatility or tau not above 0, a score outside [0, 1], a weight
    outside (0, 1] or negative periods; :class:`engine.rating.UnratableMatch` (``unsupported_match``)
    when every expected score is exactly 0 or 1 (ratings some 6,400 points apart: v is infinite);
    :class:`ArithmeticError` if step 5.4 does not converge.
    """
    for name, value in (("rating", rating), ("deviation", deviation), ("volatility", volatility), ("tau", tau),
                        ("epsilon", epsilon), ("periods", periods), ("weight", weight)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if deviation <= 0 or volatility <= 0 or tau <= 0 or epsilon <= 0:
        raise ValueError("deviation, volatility, tau and epsilon must be above 0")
    if periods < 0:
        raise ValueError(f"periods must be >= 0, got {periods!r}")
    if not 0 < weight <= 1:
        raise ValueError(f"weight must be in (0, 1], got {weight!r}")
    games = []
    for opponent_rating, opponent_deviation, score in results:
        if not (math.isfinite(opponent_rating) and math.isfinite(opponent_deviation)) or opponent_deviation <= 0:
            raise ValueError(f"an opponent needs a finite rating and a deviation above 0, got "
                             f"({opponent_rating!r}, {opponent_deviation!r})")
        if not 0 <= score <= 1:
            raise ValueError(f"a score must be in [0, 1], got {score!r}")
        games.append(((opponent_rating - CENTRE) / SCALE, opponent_deviation / SCALE, score))
    change, phi, sigma, _, _ = _period((rating - CENTRE) / SCALE, deviation / SCALE, volatility, games, weight, tau,
                                 epsilon, periods)
    # step 8 as r + 173.7178 (μ' - μ), equal to 173.7178 μ' + 1500 but without a round trip's rounding
    return rating + change * SCALE, phi * SCALE, sigma


_SCORES = {Outcome.SIDE_A_WON: (1.0, 0.0), Outcome.SIDE_B_WON: (0.0, 1.0), Outcome.DRAW: (0.5, 0.5)}


@dataclass(frozen=True, slots=True)
class Glicko2Policy:
    """A ladder rated with Glicko-2, each match its own rating period (lichess's practice).

    Defaults are lichess's (``lila`` ``modules/rating`` ``Glicko.scala`` and scalachess's
    ``GlickoCalculator``): ``initial_rating`` 1500, ``initial_deviation`` 500 (the paper's example
    uses 350), ``initial_volatility`` 0.09 (the paper: 0.06), ``tau`` 0.75, ``periods_per_day``
    0.21436 (a deviation of 60 grows to 110 in a year without matches at volatility 0.06),
    ``min_deviation`` 45, ``max_deviation`` 500, ``max_volatility`` 0.1, ``max_rating_change`` 700
    rating points per match (``None``: no cap), ``provisional_deviation`` 110 (a rating is
    provisional at or above it), ``rankable_deviation`` 75 (rankable at or below it, lichess's
    standard chess value), ``conservative_k`` 2 (the leaderboard's rating - k × deviation);
    ``epsilon`` 1e-6 (step 5.4's tolerance, the paper's).

    Rating points, deviations and changes are on the Glicko scale (1500-centred); volatility on the
    Glicko-2 scale; times in seconds since the epoch. Raises ``ValueError`` for parameters out of
    range. The policy's deviation bounds apply to the deviation grown since the last match (capped at
    ``max_deviation``) and to the deviation after a match; ``max_volatility`` to the volatility after.
    """

    initial_rating: float = 1500.0
    initial_deviation: float = 500.0
    initial_volatility: float = 0.09
    tau: float = 0.75
    periods_per_day: float = 0.21436
    min_deviation: float = 45.0
    max_deviation: float = 500.0
    max_volatility: float = 0.1
    max_rating_change: float | None = 700.0
    provisional_deviation: float = 110.0
    rankable_deviation: float = 75.0
    conservative_k: float = 2.0
    epsilon: float = 1e-6
    version: str = ""
    model: str = "glicko2"

    def __post_init__(self) -> None:
        for name in ("initial_rating", "initial_deviation", "initial_volatility", "tau", "periods_per_day",
                     "min_deviation", "max_deviation", "max_volatility", "provisional_deviation",
                     "rankable_deviation", "conservative_k", "epsilon"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
        if not 0 < self.min_deviation <= self.initial_deviation <= self.max_deviation:
            raise ValueError("deviations need 0 < min_deviation <= initial_deviation <= max_deviation")
        if not 0 < self.initial_volatility <= self.max_volatility:
            raise ValueError("volatility needs 0 < initial_volatility <= max_volatility")
        if self.tau <= 0 or self.epsilon <= 0 or self.periods_per_day < 0 or self.conservative_k < 0:
            raise ValueError("tau and epsilon must be above 0, periods_per_day and conservative_k at least 0")
        if self.max_rating_change is not None and not self.max_rating_change > 0:
            raise ValueError(f"max_rating_change must be above 0 or None, got {self.max_rating_change!r}")
        if self.model != "glicko2":
            raise ValueError(f"a Glicko2Policy's model is 'glicko2', got {self.model!r}")

    def initial_state(self, player_id: str) -> PlayerState:
        """The state a player starts from: initial rating, deviation and volatility, no match yet."""
        return PlayerState(self.initial_rating, 0, None, None, self.initial_deviation, self.initial_volatility, None)

    def grown_deviation(self, state: PlayerState, at: float | None) -> float:
        """The deviation of ``state`` as of ``at``, in rating points: the paper's step 6 over ``t``
        rating periods, ``173.7178 sqrt(φ² + t σ²)``, with ``t`` the periods from
        ``state.last_played`` to ``at`` (no growth, the stored deviation itself, when either is
        ``None`` or ``at`` is not later), capped at ``max_deviation``. A state without a deviation
        or volatility (a player carried over from Elo) has the initial ones."""
        deviation = self.initial_deviation if state.deviation is None else state.deviation
        last = state.last_played
        if at is not None and last is not None and at > last:
            sigma = self.initial_volatility if state.volatility is None else state.volatility
            periods = (at - last) / SECONDS_PER_DAY * self.periods_per_day
            phi = deviation / SCALE
            deviation = math.sqrt(phi * phi + periods * sigma * sigma) * SCALE
        return deviation if deviation <= self.max_deviation else self.max_deviation

    def display(self, state: PlayerState, at: float | None) -> PlayerState:
        """``state`` as shown at time ``at`` (seconds since the epoch): the deviation grown since the
        player's last match (:meth:`grown_deviation`), computed on read, never stored."""
        return PlayerState(state.rating, state.games_played, state.peak_rating, state.season,
                           self.grown_deviation(state, at),
                           self.initial_volatility if state.volatility is None else state.volatility,
                           state.last_played)

    def conservative(self, state: PlayerState, at: float | None) -> float:
        """The leaderboard's rating: rating - ``conservative_k`` × the deviation as of ``at``."""
        return state.rating - self.conservative_k * self.grown_deviation(state, at)

    def provisional(self, state: PlayerState, at: float | None) -> bool:
        """Whether the rating is provisional at ``at`` (deviation ≥ ``provisional_deviation``)."""
        return self.grown_deviation(state, at) >= self.provisional_deviation

    def rankable(self, state: PlayerState, at: float | None) -> bool:
        """Whether the rating may be ranked at ``at`` (deviation ≤ ``rankable_deviation``)."""
        return self.grown_deviation(state, at) <= self.rankable_deviation

    def predict(self, sides: Sequence[Sequence[PlayerState]], at: float | None = None) -> Prediction:
        """The forecast of a proposed match (:func:`glicko2_prediction` under this policy)."""
        return glicko2_prediction(sides, self, at)

    def rate(self, match: Match | FreeForAll, states: Mapping[str, PlayerState]) -> tuple[RatingChange, ...]:
        """Rating changes of every player of ``match``, side by side, in match order.

        Each player plays, in one rating period, one game against each other side's composite
        opponent (mean rating, root-mean-square deviation of that side's players before the match),
        scored 1 / 0.5 / 0 by outcome or placement. A player absent from ``states`` starts from
        :meth:`initial_state`. ``expected_score`` and ``actual_score`` are means over the games;
        ``k_factor`` is ``173.7178 × φ'² × w × Σ g``, so that ``rating_after = rating_before +
        k_factor × (actual - expected)`` when the opponents' g are equal (always for two sides), up
        to ``max_rating_change``. Raises :class:`engine.rating.UnratableMatch` (``too_few_sides``;
        ``unsupported_match`` for placements that do not match the sides, or ratings so far apart that
        an expected score is exactly 0 or 1) and ``ValueError`` for an empty side or a weight outside
        (0, 1].
        """
        sides, scores = _sides_and_scores(match)
        return _rate_sides(self, sides, scores, states, match.played_at)


def _sides_and_scores(match: Match | FreeForAll) -> tuple[tuple[tuple[Participant, ...], ...], list[list[float]]]:
    """The sides of ``match`` and ``scores[i][j]``, side i's score against side j (1, 0.5, 0)."""
    if isinstance(match, FreeForAll):
        sides = match.sides
        placements = match.placements
        if len(placements) != len(sides):
            raise UnratableMatch("unsupported_match", f"{len(sides)} sides but {len(placements)} placements")
        n = len(sides)
        scores = [[1.0 if placements[i] < placements[j] else 0.5 if placements[i] == placements[j] else 0.0
                   for j in range(n)] for i in range(n)]
    else:
        sides = (match.side_a, match.side_b)
        a, b = _SCORES[match.outcome]
        scores = [[0.5, a], [b, 0.5]]
    if len(sides) < 2:
        raise UnratableMatch("too_few_sides", f"a match needs at least two sides, got {len(sides)}")
    if any(not side for side in sides):
        raise ValueError("a side needs at least one player")
    return sides, scores


def _rate_sides(
    policy: Glicko2Policy,
    sides: Sequence[Sequence[Participant]],
    scores: list[list[float]],
    states: Mapping[str, PlayerState],
    played_at: float | None,
) -> tuple[RatingChange, ...]:
    """Every player's change: composite opponents first (from the states before the match), then
    each player's own period against them."""
    before: list[list[tuple[str, float, PlayerState, float, float]]] = []
    composites: list[tuple[float, float]] = []
    for side in sides:
        members = []
        for participant in side:
            pid = participant.player_id
            state = states.get(pid)
            if state is None:
                state = policy.initial_state(pid)
            weight = participant.weight
            if not 0 < weight <= 1:
                raise ValueError(f"a participant's weight must be in (0, 1], got {weight!r} for {pid!r}")
            members.append((pid, weight, state, (state.rating - CENTRE) / SCALE,
                            policy.grown_deviation(state, played_at) / SCALE))
        before.append(members)
        composites.append(_composite([m[3] for m in members], [m[4] for m in members]))
    changes = []
    for i, members in enumerate(before):
        games = [(composites[j][0], composites[j][1], scores[i][j]) for j in range(len(sides)) if j != i]
        for pid, weight, state, mu, phi in members:
            changes.append(_player_change(policy, pid, weight, state, mu, phi, games))
    return tuple(changes)


def _composite(mus: list[float], phis: list[float]) -> tuple[float, float]:
    """A side as one opponent on the Glicko-2 scale: mean μ and root-mean-square φ (one player: itself)."""
    if len(mus) == 1:
        return mus[0], phis[0]
    n = len(mus)
    return sum(mus) / n, math.sqrt(sum(p * p for p in phis) / n)


def _player_change(
    policy: Glicko2Policy,
    pid: str,
    weight: float,
    state: PlayerState,
    mu: float,
    phi: float,
    games: list[tuple[float, float, float]],
) -> RatingChange:
    """One player's period against ``games`` (composite opponents), bounded by the policy."""
    sigma = policy.initial_volatility if state.volatility is None else state.volatility
    change, phi_new, sigma_new, expected, g_total = _period(mu, phi, sigma, games, weight, policy.tau,
                                                            policy.epsilon, 0.0)
    rating_before = state.rating
    rating_after = rating_before + change * SCALE
    cap = policy.max_rating_change
    if cap is not None:
        if rating_after - rating_before > cap:
            rating_after = rating_before + cap
        elif rating_before - rating_after > cap:
            rating_after = rating_before - cap
    deviation_after = min(max(phi_new * SCALE, policy.min_deviation), policy.max_deviation)
    volatility_after = min(sigma_new, policy.max_volatility)
    n = len(games)
    expected /= n
    actual = sum(game[2] for game in games) / n
    k = phi_new * phi_new * weight * g_total * SCALE
    result = "win" if actual > 0.5 else "draw" if actual == 0.5 else "loss"
    return RatingChange(pid, rating_before, rating_after, expected, actual, k, result, 0.0, False,
                        phi * SCALE, deviation_after, sigma, volatility_after)


def glicko2_prediction(sides: Sequence[Sequence[PlayerState]], policy: Glicko2Policy,
                       at: float | None = None) -> Prediction:
    """Glicko-2's forecast of a proposed match, each side the composite the policy rates against
    (mean μ, root-mean-square φ of its players' deviations grown to ``at``).

    Side i beats side j with probability ``1 / (1 + exp(-g(φ_ij) (μ_i - μ_j)))``, with
    ``φ_ij = sqrt(φ_i² + φ_j²)`` (Glickman, "Parameter estimation in large dynamic paired
    comparison experiments", 1999, the expected outcome of a game between two uncertain ratings;
    liglicko2's ``expected_score`` likewise). Glicko-2 has no draw model: ``draw_probability`` is
    ``None``. The quality is TrueSkill's draw-likelihood quality (Herbrich, Minka and Graepel, 2007)
    with the logistic's variance π²/3 as the performance variance 2β²:
    ``g(φ_ij) × exp(-(μ_i - μ_j)² / (2 (π²/3 + φ_ij²)))``, in (0, 1], 1 only for equal ratings known
    exactly. It falls as the deviations grow whenever ``|μ_i - μ_j| < sqrt(π²/3 + φ_ij²)`` (always
    for equal ratings); for a mismatch wider than that more uncertainty makes a close game likelier,
    as in TrueSkill. Raises ``ValueError`` for fewer than two sides or an empty side.
    """
    check_sides(sides)
    composites = [_composite([(s.rating - CENTRE) / SCALE for s in side],
                             [policy.grown_deviation(s, at) / SCALE for s in side]) for side in sides]

    def spread(i: int, j: int) -> tuple[float, float]:
        (mu_i, phi_i), (mu_j, phi_j) = composites[i], composites[j]
        return mu_i - mu_j, phi_i * phi_i + phi_j * phi_j

    def probability(i: int, j: int) -> float:
        difference, variance = spread(i, j)
        try:
            return 1.0 / (1.0 + math.exp(-_g(math.sqrt(variance)) * difference))
        except OverflowError:  # a gap beyond about 700 / g on the Glicko-2 scale: certain defeat
            return 0.0

    def quality(i: int, j: int) -> float:
        difference, variance = spread(i, j)
        return _g(math.sqrt(variance)) * math.exp(-difference * difference / (2.0 * (_PI_SQUARED / 3.0 + variance)))

    return from_pairwise(probability, quality, len(sides))
