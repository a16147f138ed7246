"""Weng-Lin rating models (the models openskill implements) as a ladder's policy.

Source: Ruby C. Weng and Chih-Jen Lin, "A Bayesian Approximation Method for Online Ranking",
Journal of Machine Learning Research 12 (2011) 267-300. Each player's skill is a normal
distribution N(mu, sigma^2); a side (the paper's "team") has strength theta_i = sum_j theta_ij, so
mu_i = sum_j mu_ij and sigma_i^2 = sum_j sigma_ij^2. A match with k sides ranked r(1..k) (smaller
is better, equal ranks are a tie) gives each side i two numbers, Omega_i (the step of the mean)
and Delta_i (the share of variance removed), and each player j of side i is updated as

    mu_ij    <- mu_ij + w_ij * (sigma_ij^2 / sigma_i^2) * Omega_i
    sigma_ij <- sigma_ij * sqrt(max(1 - w_ij * (sigma_ij^2 / sigma_i^2) * Delta_i, kappa))

(the player-level step at the end of each of the paper's Algorithms 1 to 4; kappa is the small
positive floor of the paper's variance updates (28) and (44)), with w_ij the player's share of the
match (partial play, in (0, 1]; 1 is the paper's update). The three models differ in Omega and
Delta; see :func:`plackett_luce`, :func:`bradley_terry` and :func:`thurstone_mosteller` (each
of the last two with full pairing, every pair of sides, or partial pairing, neighbours in rank).
gamma_i = sigma_i / c (Plackett-Luce) or sigma_i / c_iq (the pairwise models) is the paper's
suggested damping of Delta.

Standard library only; deterministic (the same inputs give bit-identical outputs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, NamedTuple

from engine.gaussian import normal_cdf, v, v_draw, w, w_draw
from engine.model import FreeForAll, Match, Outcome, Participant, PlayerState, RatingChange

if TYPE_CHECKING:
    from engine.predict import Prediction

MODELS = ("plackett_luce", "bradley_terry_full", "thurstone_mosteller_full")
"""The models of the policy files' contract (``model = "..."``)."""

PARTIAL_PAIRING_MODELS = ("bradley_terry_part", "thurstone_mosteller_part")
"""The partial-pairing variants, which :class:`WengLinPolicy` also rates (not yet offered by the
policy files)."""

ALL_MODELS = MODELS + PARTIAL_PAIRING_MODELS
"""Every model :class:`WengLinPolicy` accepts."""

SECONDS_PER_DAY = 86_400.0

_STANDARD_NORMAL = NormalDist()


class Skill(NamedTuple):
    """One player's skill belief: mean ``mu`` and standard deviation ``sigma`` (rating points)."""

    mu: float
    sigma: float


class SideUpdate(NamedTuple):
    """The paper's per-side quantities: ``omega`` (the step of the side's mean, rating points) and
    ``delta`` (the share of the side's variance to remove, unitless, before the kappa floor)."""

    omega: float
    delta: float


# --- the three models: Omega and Delta of each side -----------------------------------------------


def plackett_luce(
    mus: Sequence[float], variances: Sequence[float], ranks: Sequence[float], beta: float
) -> list[SideUpdate]:
    """Omega and Delta of each side under the Plackett-Luce model (the paper's Algorithm 4).

    ``mus`` and ``variances`` are the sides' mu_i and sigma_i^2 (rating points, squared);
    ``ranks`` their ranks (smaller is better; equal ranks tie). With
    c = sqrt(sum_i (sigma_i^2 + beta^2)), C_q = {s : r(s) >= r(q)} and A_q = |{s : r(s) = r(q)}|,
    p_iq = exp(mu_i / c) / sum_{s in C_q} exp(mu_s / c), and for each side i the sums run over
    q with r(q) <= r(i):

        Omega_i = sigma_i^2 / c * sum_q ([q = i] - p_iq) / A_q
        Delta_i = gamma_i * sigma_i^2 / c^2 * sum_q p_iq (1 - p_iq) / A_q,  gamma_i = sigma_i / c

    The exponentials of each C_q are taken relative to its largest mu_s / c (the ratios are
    unchanged), so no rating overflows them and no C_q's sum underflows to 0.
    """
    k = len(mus)
    c = math.sqrt(sum(variances) + k * beta * beta)
    scaled = [mu / c for mu in mus]
    # Each C_q's exponentials are taken relative to its own largest mu_s / c: relative to the
    # match's largest, a set of sides far below it underflows to a sum of 0.
    tops = []
    sum_q = []
    a = []
    for q in range(k):
        rank_q = ranks[q]
        members = [s for s in range(k) if ranks[s] >= rank_q]
        top = max(scaled[s] for s in members)
        tops.append(top)
        sum_q.append(math.fsum(math.exp(scaled[s] - top) for s in members))
        a.append(sum(1 for s in members if ranks[s] == rank_q))
    updates = []
    for i in range(k):
        omega = 0.0
        delta = 0.0
        for q in range(k):
            if ranks[q] <= ranks[i]:
                p = math.exp(scaled[i] - tops[q]) / sum_q[q]
                delta += p * (1.0 - p) / a[q]
                omega += ((1.0 - p) if q == i else -p) / a[q]
        variance = variances[i]
        gamma = math.sqrt(variance) / c
        updates.append(SideUpdate(omega * variance / c, gamma * delta * variance / (c * c)))
    return updates


def _logistic(x: float) -> float:
    """1 / (1 + exp(-x)) without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _pair_score(own: float, other: float) -> float:
    """1, 1/2 or 0 as the side ranked ``own`` finished above, level with or below ``other``."""
    return 1.0 if other > own else 0.5 if other == own else 0.0


def all_pairs(ranks: Sequence[float]) -> list[list[int]]:
    """Full pairing: each side's opponents are all the other sides."""
    k = len(ranks)
    return [[q for q in range(k) if q != i] for i in range(k)]


def neighbour_pairs(ranks: Sequence[float]) -> list[list[int]]:
    """Partial pairing (the paper's Algorithm 2 for Bradley-Terry): the sides ordered by rank (ties
    kept in match order, one of the orders the paper allows), each side's opponents are the sides
    just above and just below it in that order."""
    order = sorted(range(len(ranks)), key=ranks.__getitem__)
    opponents: list[list[int]] = [[] for _ in ranks]
    for position, i in enumerate(order):
        if position > 0:
            opponents[i].append(order[position - 1])
        if position + 1 < len(order):
            opponents[i].append(order[position + 1])
    return opponents


def bradley_terry(
    mus: Sequence[float],
    variances: Sequence[float],
    ranks: Sequence[float],
    beta: float,
    opponents: Sequence[Sequence[int]],
) -> list[SideUpdate]:
    """Omega and Delta of each side under the Bradley-Terry model, each side against its
    ``opponents`` (:func:`all_pairs`: the paper's Algorithm 1, full pairing; :func:`neighbour_pairs`:
    Algorithm 2, partial pairing), each pair a two-side game. With
    c_iq = sqrt(sigma_i^2 + sigma_q^2 + 2 beta^2), p_iq = 1 / (1 + exp((mu_q - mu_i) / c_iq)) and
    s = 1, 1/2 or 0 as side i ranked above, level with or below side q:

        Omega_i = sum_q sigma_i^2 / c_iq * (s - p_iq)
        Delta_i = sum_q gamma_iq * sigma_i^2 / c_iq^2 * p_iq * p_qi,  gamma_iq = sigma_i / c_iq
    """
    two_beta_sq = 2.0 * beta * beta
    updates = []
    for i, side_opponents in enumerate(opponents):
        omega = 0.0
        delta = 0.0
        variance = variances[i]
        sigma = math.sqrt(variance)
        for q in side_opponents:
            c_iq = math.sqrt(variance + variances[q] + two_beta_sq)
            p = _logistic((mus[i] - mus[q]) / c_iq)
            omega += variance / c_iq * (_pair_score(ranks[i], ranks[q]) - p)
            delta += (sigma / c_iq) * variance / (c_iq * c_iq) * p * (1.0 - p)
        updates.append(SideUpdate(omega, delta))
    return updates


def thurstone_mosteller(
    mus: Sequence[float],
    variances: Sequence[float],
    ranks: Sequence[float],
    beta: float,
    epsilon: float,
    opponents: Sequence[Sequence[int]],
) -> list[SideUpdate]:
    """Omega and Delta of each side under the Thurstone-Mosteller model, each side against its
    ``opponents`` (:func:`all_pairs`: the paper's Algorithm 3, full pairing; :func:`neighbour_pairs`:
    its partial pairing), ``epsilon`` the draw margin (rating points). With
    c_iq = sqrt(sigma_i^2 + sigma_q^2 + 2 beta^2), x = (mu_i - mu_q) / c_iq, t = epsilon / c_iq and
    gamma_iq = sigma_i / c_iq, each opponent q adds to Omega_i and Delta_i:

    * side i ranked above q: sigma_i^2 / c_iq * V(x, t) and gamma_iq sigma_i^2 / c_iq^2 * W(x, t);
    * below: -sigma_i^2 / c_iq * V(-x, t) and gamma_iq sigma_i^2 / c_iq^2 * W(-x, t);
    * level (a draw): sigma_i^2 / c_iq * V~(x, t) and gamma_iq sigma_i^2 / c_iq^2 * W~(x, t)

    (:func:`v`, :func:`w`, :func:`v_draw`, :func:`w_draw`). Thurstone-Mosteller is the model
    TrueSkill approximates (a normal performance difference with a draw margin).
    """
    two_beta_sq = 2.0 * beta * beta
    updates = []
    for i, side_opponents in enumerate(opponents):
        omega = 0.0
        delta = 0.0
        variance = variances[i]
        sigma = math.sqrt(variance)
        for q in side_opponents:
            c_iq = math.sqrt(variance + variances[q] + two_beta_sq)
            x = (mus[i] - mus[q]) / c_iq
            t = epsilon / c_iq
            step = variance / c_iq
            shrink = (sigma / c_iq) * variance / (c_iq * c_iq)
            if ranks[q] > ranks[i]:
                omega += step * v(x, t)
                delta += shrink * w(x, t)
            elif ranks[q] < ranks[i]:
                omega -= step * v(-x, t)
                delta += shrink * w(-x, t)
            else:
                omega += step * v_draw(x, t)
                delta += shrink * w_draw(x, t)
        updates.append(SideUpdate(omega, delta))
    return updates


# --- rating a match --------------------------------------------------------------------------------


def _side_updates(
    model: str,
    mus: Sequence[float],
    variances: Sequence[float],
    ranks: Sequence[float],
    beta: float,
    epsilon: float,
) -> list[SideUpdate]:
    if model == "plackett_luce":
        return plackett_luce(mus, variances, ranks, beta)
    opponents = neighbour_pairs(ranks) if model.endswith("_part") else all_pairs(ranks)
    if model.startswith("bradley_terry"):
        return bradley_terry(mus, variances, ranks, beta, opponents)
    return thurstone_mosteller(mus, variances, ranks, beta, epsilon, opponents)


def win_probability(a: Skill, b: Skill, beta: float) -> float:
    """P(side a beats side b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)), the
    Thurstone-Mosteller probability of the performance difference (openskill's ``predict_win``
    for two sides; a and b are the sides' aggregate skills)."""
    return normal_cdf((a.mu - b.mu) / math.sqrt(2.0 * beta * beta + a.sigma * a.sigma + b.sigma * b.sigma))


def _side_skill(side: Sequence[Skill]) -> Skill:
    return Skill(math.fsum(p.mu for p in side), math.sqrt(math.fsum(p.sigma * p.sigma for p in side)))


def predict_win(sides: Sequence[Sequence[Skill]], beta: float) -> list[float]:
    """Each side's probability of winning (sum 1), as openskill's ``predict_win``: for two sides
    :func:`win_probability`; for more, each side's mean pairwise win probability against the
    others, normalised to sum 1 (the mean pairwise probabilities sum to n / 2, so this is each
    side's share 2 / n of its expected pairwise wins, as in :mod:`engine.predict`)."""
    skills = [_side_skill(side) for side in sides]
    n = len(skills)
    if n == 2:
        p = win_probability(skills[0], skills[1], beta)
        return [p, 1.0 - p]
    means = [
        sum(win_probability(skills[i], skills[j], beta) for j in range(n) if j != i) / (n - 1) for i in range(n)
    ]
    total = sum(means)
    return [m / total for m in means]


def predict_draw(sides: Sequence[Sequence[Skill]], beta: float) -> float:
    """The probability of a draw, as openskill's ``predict_draw``: with N players in all, a draw
    margin m = sqrt(N) * beta * Phi^-1((1 + 1/N) / 2) (TrueSkill's margin for a draw rate of 1/N),
    the mean over pairs of sides of P(|performance difference| < m) =
    Phi((m - d) / s) - Phi((-d - m) / s), d = mu_a - mu_b, s = sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)."""
    skills = [_side_skill(side) for side in sides]
    players = sum(len(side) for side in sides)
    margin = math.sqrt(players) * beta * _STANDARD_NORMAL.inv_cdf((1.0 + 1.0 / players) / 2.0)
    pairs = []
    for i in range(len(skills)):
        for j in range(i + 1, len(skills)):
            a, b = skills[i], skills[j]
            spread = math.sqrt(2.0 * beta * beta + a.sigma * a.sigma + b.sigma * b.sigma)
            d = a.mu - b.mu
            pairs.append(normal_cdf((margin - d) / spread) - normal_cdf((-d - margin) / spread))
    return sum(pairs) / len(pairs)


def match_quality(sides: Sequence[Sequence[Skill]], beta: float) -> float:
    """A match quality in (0, 1]: over pairs of sides, the mean of

        sqrt(2 beta^2 / s^2) * exp(-d^2 / (4 beta^2)),  d = mu_a - mu_b,
        s^2 = 2 beta^2 + sigma_a^2 + sigma_b^2.

    The first factor is TrueSkill's (Herbrich, Minka and Graepel, "TrueSkill: A Bayesian Skill
    Rating System", NIPS 2006: the two-side quality, a draw's likelihood relative to a sure draw's);
    the second is TrueSkill's exponential at sigma 0, how even the sides are if their means were
    exact. TrueSkill itself puts s^2 in the exponential too, which lets an uneven match's quality
    rise as the sigmas grow (mus 0 and 7, sigma 1 to 2: 0.499 to 0.508); here quality is 1 only for
    equal means and no uncertainty, and falls strictly as any sigma grows or the means part.
    """
    skills = [_side_skill(side) for side in sides]
    two_beta_sq = 2.0 * beta * beta
    values = []
    for i in range(len(skills)):
        for j in range(i + 1, len(skills)):
            a, b = skills[i], skills[j]
            spread_sq = two_beta_sq + a.sigma * a.sigma + b.sigma * b.sigma
            d = a.mu - b.mu
            values.append(math.sqrt(two_beta_sq / spread_sq) * math.exp(-d * d / (2.0 * two_beta_sq)))
    return sum(values) / len(values)


# --- the policy ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WengLinPolicy:
    """A ladder rated by one of the Weng-Lin models (:data:`ALL_MODELS`), implementing
    :class:`engine.policy.UncertaintyPolicy`. A player's ``rating`` is mu and ``deviation`` sigma
    (rating points; ``volatility`` stays ``None``).

    * ``mu``, ``sigma``: a new player's skill (openskill's defaults 25 and 25/3);
    * ``beta``: the spread of one performance around the skill (25/6);
    * ``kappa``: the floor of a variance's shrink factor (1e-4);
    * ``tau``: additive dynamics per match, sigma^2 + tau^2 before each match (25/300);
    * ``tau_per_day``: growth with inactivity, sigma^2 + tau_per_day^2 * days since the player's
      last match (both matches' ``played_at``), capped at ``sigma``; 0 (off) by default, as in
      openskill, which has no clock;
    * ``limit_sigma``: a match never leaves a player's sigma above what it was before the match
      (before ``tau``), as openskill's ``limit_sigma``;
    * ``epsilon``: the Thurstone-Mosteller draw margin (0.1, openskill's default);
    * ``conservative_k``: the conservative rating is mu - k * sigma (3, openskill's ``ordinal``);
    * ``version``: content hash of the configuration the policy was read from.

    Ranks come from the match: side A ahead of side B, level on a draw; a free-for-all's
    placements. Each player's update is scaled by its ``Participant.weight`` (partial play).
    """

    model: str = "plackett_luce"
    mu: float = 25.0
    sigma: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    kappa: float = 0.0001
    tau: float = 25.0 / 300.0
    tau_per_day: float = 0.0
    limit_sigma: bool = False
    epsilon: float = 0.1
    conservative_k: float = 3.0
    version: str = ""

    def __post_init__(self) -> None:
        if self.model not in ALL_MODELS:
            raise ValueError(f"unknown Weng-Lin model {self.model!r}; expected one of {', '.join(ALL_MODELS)}")
        for name in ("sigma", "beta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 (got {getattr(self, name)!r})")
        if not 0 < self.kappa < 1:
            raise ValueError(f"kappa must be in (0, 1) (got {self.kappa!r})")
        for name in ("tau", "tau_per_day", "epsilon"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 (got {getattr(self, name)!r})")

    def initial_state(self, player_id: str) -> PlayerState:
        """The state every player starts from: mu and sigma of the policy."""
        return PlayerState(rating=self.mu, deviation=self.sigma)

    def display(self, state: PlayerState, at: float | None) -> PlayerState:
        """``state`` as of ``at`` (seconds since the epoch): sigma grown by ``tau_per_day`` for the
        days since ``state.last_played`` (capped at the policy's ``sigma``; computed, never stored).
        Unchanged when ``at`` or ``last_played`` is ``None`` or the growth is off."""
        sigma = self._sigma_at(state, at)
        if sigma == state.deviation:
            return state
        return PlayerState(
            rating=state.rating,
            games_played=state.games_played,
            peak_rating=state.peak_rating,
            season=state.season,
            deviation=sigma,
            volatility=state.volatility,
            last_played=state.last_played,
        )

    def conservative(self, state: PlayerState, at: float | None = None, k: float | None = None) -> float:
        """mu - k * sigma as of ``at`` (k defaults to ``conservative_k``, 3: openskill's
        ``ordinal``); the rating a leaderboard ranks by."""
        factor = self.conservative_k if k is None else k
        return state.rating - factor * self._sigma_at(state, at)

    def _sigma_at(self, state: PlayerState, at: float | None) -> float:
        sigma = self.sigma if state.deviation is None else state.deviation
        if self.tau_per_day == 0.0 or at is None or state.last_played is None or at <= state.last_played:
            return sigma
        if sigma >= self.sigma:
            return sigma
        days = (at - state.last_played) / SECONDS_PER_DAY
        return min(math.sqrt(sigma * sigma + self.tau_per_day * self.tau_per_day * days), self.sigma)

    def rate(self, match: Match | FreeForAll, states: Mapping[str, PlayerState]) -> tuple[RatingChange, ...]:
        """Rating changes of every player of ``match``, side by side, in match order.

        A player absent from ``states`` starts from :meth:`initial_state`. Each player's sigma is
        taken as of the match (:meth:`display`) and widened by ``tau`` (sigma^2 + tau^2); the sides'
        Omega and Delta come from the model, and each player's mu and sigma move as the module doc
        says, the step scaled by the player's weight; ``limit_sigma`` then caps sigma at its value
        before. ``rating_before`` and ``deviation_before`` are mu and sigma as of the match (before
        ``tau``); ``expected_score`` is the side's mean pairwise win probability
        (:func:`win_probability`, from the widened sigmas) and ``actual_score`` its mean pairwise
        score (1, 1/2, 0); ``k_factor`` is the effective step (rating_after - rating_before) /
        (actual - expected), 0 when they are equal. Raises ``ValueError`` for an empty side, fewer
        than two sides or a weight outside (0, 1]; ``TypeError`` for a state that is not a
        :class:`engine.model.PlayerState`.
        """
        sides, ranks = _sides_and_ranks(match)
        if len(sides) < 2:
            raise ValueError(f"a match needs two or more sides (got {len(sides)})")
        rows, mus, variances = self._before(sides, states, match.played_at)
        updates = _side_updates(self.model, mus, variances, ranks, self.beta, self.epsilon)
        two_beta_sq = 2.0 * self.beta * self.beta
        kappa = self.kappa
        n = len(sides)
        changes = []
        for i, row in enumerate(rows):
            omega, delta = updates[i]
            side_variance = variances[i]
            expected = 0.0
            actual = 0.0
            for q in range(n):
                if q != i:
                    expected += normal_cdf((mus[i] - mus[q]) / math.sqrt(two_beta_sq + side_variance + variances[q]))
                    actual += _pair_score(ranks[i], ranks[q])
            expected /= n - 1
            actual /= n - 1
            gap = actual - expected
            result = "win" if actual > 0.5 else "draw" if actual == 0.5 else "loss"
            for player_id, weight, mu, sigma_before, variance in row:
                share = weight * variance / side_variance
                mu_after = mu + share * omega
                sigma_after = math.sqrt(variance) * math.sqrt(max(1.0 - share * delta, kappa))
                if self.limit_sigma and sigma_after > sigma_before:
                    sigma_after = sigma_before
                k_factor = (mu_after - mu) / gap if gap != 0.0 else 0.0
                changes.append(
                    RatingChange(player_id, mu, mu_after, expected, actual, k_factor, result, 0.0, False,
                                 sigma_before, sigma_after, None, None)
                )
        return tuple(changes)

    def _before(
        self, sides: Sequence[Sequence[Participant]], states: Mapping[str, PlayerState], at: float | None
    ) -> tuple[list[list[tuple[str, float, float, float, float]]], list[float], list[float]]:
        """Per side, each player's (id, weight, mu, sigma as of ``at``, variance with tau), and
        each side's mu_i (sum of mus) and sigma_i^2 (sum of the variances)."""
        tau_sq = self.tau * self.tau
        rows = []
        mus = []
        variances = []
        for side in sides:
            if not side:
                raise ValueError("every side needs at least one player")
            row = []
            mu_sum = 0.0
            variance_sum = 0.0
            for participant in side:
                weight = participant.weight
                if not 0.0 < weight <= 1.0:
                    raise ValueError(f"weight of {participant.player_id!r} must be in (0, 1] (got {weight!r})")
                state = states.get(participant.player_id)
                if state is None:
                    state = self.initial_state(participant.player_id)
                elif not isinstance(state, PlayerState):
                    raise TypeError(f"Weng-Lin rates from PlayerState, not {type(state).__name__}")
                sigma = self._sigma_at(state, at)
                variance = sigma * sigma + tau_sq
                row.append((participant.player_id, weight, state.rating, sigma, variance))
                mu_sum += state.rating
                variance_sum += variance
            rows.append(row)
            mus.append(mu_sum)
            variances.append(variance_sum)
        return rows, mus, variances

    def predict(self, sides: Sequence[Sequence[PlayerState]], at: float | None = None) -> Prediction:
        """Win probabilities (one per side, sum 1; :func:`predict_win`), the draw probability
        (:func:`predict_draw`) and the match quality (:func:`match_quality`) of proposed ``sides``,
        each player's sigma as of ``at`` (:meth:`display`; ``tau`` is not added). Raises
        ``ValueError`` for fewer than two sides or an empty side."""
        from engine.predict import Prediction, check_sides

        check_sides(sides)
        skills = [[Skill(s.rating, self._sigma_at(s, at)) for s in side] for side in sides]
        return Prediction(
            win_probabilities=tuple(predict_win(skills, self.beta)),
            draw_probability=predict_draw(skills, self.beta),
            quality=match_quality(skills, self.beta),
        )


def _sides_and_ranks(match: Match | FreeForAll) -> tuple[list[tuple[Participant, ...]], list[float]]:
    """The match's sides and their ranks (smaller is better; equal on a draw)."""
    if isinstance(match, FreeForAll):
        if len(match.placements) != len(match.sides):
            raise ValueError(f"{len(match.sides)} sides but {len(match.placements)} placements")
        return list(match.sides), [float(p) for p in match.placements]
    ranks_by_outcome: dict[Outcome, list[float]] = {
        Outcome.SIDE_A_WON: [1.0, 2.0],
        Outcome.SIDE_B_WON: [2.0, 1.0],
        Outcome.DRAW: [1.0, 1.0],
    }
    return [match.side_a, match.side_b], ranks_by_outcome[Outcome(match.outcome)]

