"""The general entry point: rate one finished match under a policy."""

from __future__ import annotations

from collections.abc import Mapping

from engine.elo import DRAW, LOSS, WIN, expected_score
from engine.k_factor import BandedK, ConstantK
from engine.model import FreeForAll, Match, Outcome, Participant, PlayerState, RatingChange
from engine.policy import AnyPolicy, RatingPolicy, Rounding, TeamRating

BASE_SCORES = {
    # Actual scores (side A, side B) before any performance adjustment: win 1, draw 0.5, loss 0.
    Outcome.SIDE_A_WON: (WIN, LOSS),
    Outcome.SIDE_B_WON: (LOSS, WIN),
    Outcome.DRAW: (DRAW, DRAW),
}
_PLACEMENTS = {Outcome.SIDE_A_WON: (1, 2), Outcome.SIDE_B_WON: (2, 1), Outcome.DRAW: (1, 1)}
_RESULT = {WIN: "win", DRAW: "draw", LOSS: "loss"}
_HOME_INDEX = {"side_a": 0, "side_b": 1}
_SIDE_A_WON, _SIDE_B_WON = Outcome.SIDE_A_WON, Outcome.SIDE_B_WON
_HALF_EVEN, _NO_ROUNDING = Rounding.HALF_EVEN, Rounding.NONE
_new_change = tuple.__new__


class UnratableMatch(ValueError):
    """The policy cannot rate this match (e.g. uneven sides where the policy rejects them, or a
    margin-of-victory policy given a match without a score). ``reason_code`` is the dead-letter
    reason: ``uneven_sides``, ``missing_score``, ``too_few_sides`` or ``unsupported_match``."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


def rate(
    match: Match | FreeForAll, ratings: Mapping[str, float | PlayerState], policy: AnyPolicy
) -> tuple[RatingChange, ...]:
    """Rating changes of every player of ``match``, side by side (side A first), in match order.

    ``ratings`` maps player id to current rating (rating points) or to a
    :class:`engine.model.PlayerState` (rating, games played, peak, season); a player absent from it
    starts at the policy's initial rating for that player. For each player:

    * at the first match of a new season, the rating is regressed (``policy.season``), and raised
      to ``policy.floor`` if that left it below;
    * a side's rating is the mean (or sum) of its players' ratings, plus the home advantage for the
      home side; for each pair of sides, expected score E = 1 / (1 + 10^((R_opp − R_own) / scale)),
      with R_opp − R_own clamped to ±``difference_cap`` when the policy has one, saturating at 0
      and 1 where 10^x overflows (:func:`engine.elo.expected_score`);
    * actual score S = 1 / 0.5 / 0 for a win / draw / loss against that side (by placement), then
      adjusted by the player's own Sedma performance when the policy has one
      (:class:`engine.sedma.SedmaAdjustment`);
    * K from the player's rating, games played and peak before the match, times the
      margin-of-victory multiplier (> 0: its divisor is floored, :class:`engine.policy.MarginOfVictory`);
      new rating = round(R + K · Σ (S − E)), K divided by the number
      of opposing sides in a free-for-all; then at least ``policy.floor``.

    For a 1v1 Sedma match this is exactly the seed's ``CalculateNewRatings``; for a two-sided
    match under FiveThirtyEight's NFL policy, exactly ``forecast.py``'s update. Raises
    :class:`UnratableMatch` when the policy cannot rate the match, ``ValueError`` if a side is empty.

    A model with uncertainty (:class:`engine.policy.UncertaintyPolicy`) rates the match itself, from
    the :class:`engine.model.PlayerState` of each player (a bare rating is a ``TypeError`` there).
    """
    if not isinstance(policy, RatingPolicy):
        return policy.rate(match, ratings)  # type: ignore[arg-type]
    if policy.is_basic and match.__class__ is Match:
        return _rate_basic(match, ratings, policy)
    return _rate_general(match, ratings, policy)


def _rating_of(state: float | PlayerState | None, initial: float) -> float:
    if state is None:
        return initial
    if state.__class__ is PlayerState:
        return state.rating  # type: ignore[union-attr]
    return state  # type: ignore[return-value]


_Ratings = Mapping[str, float | PlayerState]


def _rate_basic(match: Match, ratings: _Ratings, policy: RatingPolicy) -> tuple[RatingChange, ...]:
    """K by rating only, mean side rating, no home advantage, cap, floor, season or margin.

    The 1v1 case is written out flat (the engine's speed target is for it): no helper calls for
    the rating lookup, a constant K or half-to-even rounding, outcome tested by identity (an Enum's
    hash is a Python-level call), and each RatingChange built with ``tuple.__new__``. The
    arithmetic is the same expressions in the same order as the general case and
    :mod:`engine.elo`. Matches of teams go to :func:`_rate_basic_sides`.
    """
    side_a, side_b = match.side_a, match.side_b
    outcome = match.outcome
    if outcome is _SIDE_A_WON:
        base_a, base_b, result_a, result_b = WIN, LOSS, "win", "loss"
    elif outcome is _SIDE_B_WON:
        base_a, base_b, result_a, result_b = LOSS, WIN, "loss", "win"
    else:
        base_a, base_b, result_a, result_b = DRAW, DRAW, "draw", "draw"
    if len(side_a) != 1 or len(side_b) != 1:
        return _rate_basic_sides(match, ratings, policy, base_a, base_b)
    initial = policy.initial_rating
    scale = policy.scale
    k_factor = policy.k_factor
    adjustment = policy.performance
    rounding = policy.rounding
    pa, pb = side_a[0], side_b[0]
    ra = ratings.get(pa.player_id, initial)
    ra = ra.rating if ra.__class__ is PlayerState else ra  # type: ignore[union-attr]
    rb = ratings.get(pb.player_id, initial)
    rb = rb.rating if rb.__class__ is PlayerState else rb  # type: ignore[union-attr]
    try:  # engine.elo.expected_score, inline, with its saturation at 0 and 1
        expected_a = 1.0 / (1.0 + 10.0 ** ((rb - ra) / scale))
    except OverflowError:
        expected_a = 0.0
    try:
        expected_b = 1.0 / (1.0 + 10.0 ** ((ra - rb) / scale))
    except OverflowError:
        expected_b = 0.0
    if k_factor.__class__ is ConstantK:
        k_a = k_b = k_factor.k  # type: ignore[union-attr]
    elif k_factor.__class__ is BandedK:
        k_a = _banded_k(k_factor, ra)  # type: ignore[arg-type]
        k_b = _banded_k(k_factor, rb)  # type: ignore[arg-type]
    else:
        k_a, k_b = k_factor(ra), k_factor(rb)
    if adjustment is None:
        actual_a, actual_b = base_a, base_b
    else:  # SedmaAdjustment.adjusted_score's memo, looked up here first (same key)
        memo = adjustment._memo
        q = pa.performance
        actual_a = memo.get((base_a, q.bad_moves, q.won_by_16, q.won_by_24, q.won_by_4_and_last))
        if actual_a is None:
            actual_a = adjustment.adjusted_score(base_a, q)
        q = pb.performance
        actual_b = memo.get((base_b, q.bad_moves, q.won_by_16, q.won_by_24, q.won_by_4_and_last))
        if actual_b is None:
            actual_b = adjustment.adjusted_score(base_b, q)
    after_a = ra + k_a * (actual_a - expected_a)
    after_b = rb + k_b * (actual_b - expected_b)
    if rounding is _HALF_EVEN:
        after_a, after_b = float(round(after_a)), float(round(after_b))
    elif rounding is not _NO_ROUNDING:
        after_a, after_b = policy.round(after_a), policy.round(after_b)
    return (
        _new_change(RatingChange, (pa.player_id, ra, after_a, expected_a, actual_a, k_a, result_a, 0.0, False,
                                   None, None, None, None)),
        _new_change(RatingChange, (pb.player_id, rb, after_b, expected_b, actual_b, k_b, result_b, 0.0, False,
                                   None, None, None, None)),
    )


def _banded_k(k_factor: BandedK, rating: float) -> float:
    """:meth:`engine.k_factor.BandedK.__call__` without its method lookup: the K of the first band
    whose upper bound is above ``rating``, else the top band's K."""
    for upper, k in k_factor.bands:
        if rating < upper:
            return k
    return k_factor.top_k


def _rate_basic_sides(
    match: Match, ratings: _Ratings, policy: RatingPolicy, base_a: float, base_b: float
) -> tuple[RatingChange, ...]:
    """:func:`_rate_basic` for sides of any size: each side's mean rating against the other's;
    ``base_a`` and ``base_b`` are the sides' actual scores before adjustment (1, 0.5 or 0)."""
    initial = policy.initial_rating
    k_factor = policy.k_factor
    adjustment = policy.performance
    side_a, side_b = match.side_a, match.side_b
    before_a = [_rating_of(ratings.get(p.player_id), initial) for p in side_a]
    before_b = [_rating_of(ratings.get(p.player_id), initial) for p in side_b]
    if not before_a or not before_b:
        raise ValueError("a side needs at least one player")
    mean_a = before_a[0] if len(before_a) == 1 else sum(before_a) / len(before_a)
    mean_b = before_b[0] if len(before_b) == 1 else sum(before_b) / len(before_b)
    expected_a = expected_score(mean_a, mean_b, policy.scale)
    expected_b = expected_score(mean_b, mean_a, policy.scale)
    changes: list[RatingChange] = []
    for players, befores, expected, base in (
        (side_a, before_a, expected_a, base_a),
        (side_b, before_b, expected_b, base_b),
    ):
        for participant, before in zip(players, befores):
            k = k_factor(before)
            actual = base if adjustment is None else adjustment.adjusted_score(base, participant.performance)
            after = policy.round(before + k * (actual - expected))
            changes.append(RatingChange(participant.player_id, before, after, expected, actual, k, _RESULT[base]))
    return tuple(changes)


def _rate_general(match: Match | FreeForAll, ratings: _Ratings, policy: RatingPolicy) -> tuple[RatingChange, ...]:
    """Any match under any policy: the steps :func:`rate` lists, one helper each."""
    sides, placements = _checked_sides(match, policy)
    n = len(sides)
    befores, states = _states_before(match, sides, ratings, policy)
    side_ratings = _side_ratings(match, befores, policy)
    expected, capped = _expected_scores(side_ratings, policy)
    multiplier = 1.0
    if policy.margin_of_victory is not None:
        multiplier = _margin_multiplier(match, placements, side_ratings, policy)
    # The policy's attributes as locals: looked up once per match, not once per player.
    adjustment, k_factor, mov, floor, round_ = (policy.performance, policy.k_factor, policy.margin_of_victory,
                                                policy.floor, policy.round)
    divisor = (n - 1) if policy.free_for_all_divide else 1
    changes: list[RatingChange] = []
    for i, side in enumerate(sides):
        opponents = [j for j in range(n) if j != i]
        bases = [WIN if placements[i] < placements[j] else DRAW if placements[i] == placements[j] else LOSS
                 for j in opponents]
        side_expected = [expected[i][j] for j in opponents]
        for participant, before, (games, peak) in zip(side, befores[i], states[i]):
            k = k_factor(before, games, peak)
            if adjustment is None:
                actuals = bases
            else:
                actuals = [adjustment.adjusted_score(b, participant.performance) for b in bases]
            if n == 2:
                k_effective = k * multiplier if mov is not None else k
                e, s = side_expected[0], actuals[0]
                after = before + k_effective * (s - e)
                base_mean = bases[0]
            else:
                total = 0.0
                for s, e in zip(actuals, side_expected):
                    total += s - e
                after = before + (k / divisor) * total
                e = sum(side_expected) / (n - 1)
                s = sum(actuals) / (n - 1)
                k_effective = k * (n - 1) / divisor
                base_mean = sum(bases) / (n - 1)
            after = round_(after)
            floor_points = 0.0
            if floor is not None and after < floor:
                floor_points = floor - after
                after = floor
            result = "win" if base_mean > 0.5 else "draw" if base_mean == 0.5 else "loss"
            changes.append(
                RatingChange(participant.player_id, before, after, e, s, k_effective, result, floor_points, capped[i])
            )
    return tuple(changes)


def _checked_sides(
    match: Match | FreeForAll, policy: RatingPolicy
) -> tuple[tuple[tuple[Participant, ...], ...], tuple[int, ...]]:
    """The match's sides and their placements (1 = first), after checking the policy can rate them.

    Raises :class:`UnratableMatch` (``unsupported_match``, ``too_few_sides``, ``uneven_sides``,
    ``missing_score``) and ``ValueError`` for an empty side.
    """
    if isinstance(match, FreeForAll):
        sides, placements = match.sides, match.placements
        if len(placements) != len(sides):
            raise UnratableMatch("unsupported_match", f"{len(sides)} sides but {len(placements)} placements")
    else:
        sides, placements = (match.side_a, match.side_b), _PLACEMENTS[match.outcome]
    n = len(sides)
    if n < 2:
        raise UnratableMatch("too_few_sides", f"a match needs at least two sides, got {n}")
    if any(not side for side in sides):
        raise ValueError("a side needs at least one player")
    if not policy.uneven_sides and len({len(side) for side in sides}) > 1:
        raise UnratableMatch(
            "uneven_sides",
            f"this ladder's policy rates only sides of equal size; got sizes {[len(s) for s in sides]}",
        )
    if policy.margin_of_victory is not None:
        if n != 2:
            raise UnratableMatch("unsupported_match", "a margin-of-victory policy rates two-sided matches only")
        if match.scores is None:
            raise UnratableMatch("missing_score", "this ladder's policy needs the match's score (margin of victory)")
    return sides, placements


def _states_before(
    match: Match | FreeForAll, sides: tuple[tuple[Participant, ...], ...], ratings: _Ratings, policy: RatingPolicy
) -> tuple[list[list[float]], list[list[tuple[int, float | None]]]]:
    """Per side, each player's rating before the match (rating points, after any season regression
    and the floor) and ``(games played, peak rating)`` for the K-factor; a player without a state
    starts at the policy's initial rating for them."""
    season, floor = policy.season, policy.floor
    befores: list[list[float]] = []
    states: list[list[tuple[int, float | None]]] = []
    for side in sides:
        side_befores, side_states = [], []
        for participant in side:
            pid = participant.player_id
            state = ratings.get(pid)
            if state is None:
                rating, games, peak, last_season = policy.initial_for(pid), 0, None, None
            elif state.__class__ is PlayerState:
                rating, games, peak, last_season = (state.rating, state.games_played,  # type: ignore[union-attr]
                                                    state.peak_rating, state.season)  # type: ignore[union-attr]
            else:
                rating, games, peak, last_season = state, 0, None, None  # type: ignore[assignment]
            if (season is not None and match.season is not None and last_season is not None
                    and last_season != match.season):
                rating = season.start_of_season(pid, match.season, rating)
                if floor is not None and rating < floor:
                    # The floor holds at a season start too: a regression toward a mean below the
                    # floor, or by a rounding error of the doubles from a rating at the floor
                    # (1 ulp: (1 - w) * F + w * F < F for some F and w), stops at the floor.
                    rating = floor
            side_befores.append(rating)
            side_states.append((games, peak))
        befores.append(side_befores)
        states.append(side_states)
    return befores, states


def _side_ratings(match: Match | FreeForAll, befores: list[list[float]], policy: RatingPolicy) -> list[float]:
    """Each side's rating: the sum or the mean of its players' (``policy.team_rating``), plus the
    home advantage for the home side (rating points)."""
    if policy.team_rating is TeamRating.SUM:
        side_ratings = [sum(b) for b in befores]
    else:
        side_ratings = [b[0] if len(b) == 1 else sum(b) / len(b) for b in befores]
    home = _HOME_INDEX.get(match.home) if match.home is not None else None
    if home is not None and policy.home_advantage:
        side_ratings[home] += policy.home_advantage
    return side_ratings


def _expected_scores(side_ratings: list[float], policy: RatingPolicy) -> tuple[list[list[float]], list[bool]]:
    """Pairwise expected scores (``[i][j]``: side i against side j, in [0, 1]) with the rating
    difference clamped to ±``policy.difference_cap``, and per side whether a clamp applied."""
    n = len(side_ratings)
    scale, cap = policy.scale, policy.difference_cap
    expected = [[0.0] * n for _ in range(n)]
    capped = [False] * n
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            difference = side_ratings[j] - side_ratings[i]
            if cap is not None and abs(difference) > cap:
                difference = cap if difference > 0 else -cap
                capped[i] = True
            expected[i][j] = expected_score(0.0, difference, scale)  # difference - 0.0 is exact: the same bits
    return expected, capped


def _margin_multiplier(
    match: Match | FreeForAll, placements: tuple[int, ...], side_ratings: list[float], policy: RatingPolicy
) -> float:
    """The margin-of-victory multiplier of K (> 0) for a two-sided match with a score
    (:class:`engine.policy.MarginOfVictory`)."""
    mov = policy.margin_of_victory
    assert mov is not None and match.scores is not None  # checked by _checked_sides
    margin = match.scores[0] - match.scores[1]
    if placements[0] == placements[1]:
        winner_difference = None
    elif placements[0] < placements[1]:
        winner_difference = side_ratings[0] - side_ratings[1]
    else:
        winner_difference = side_ratings[1] - side_ratings[0]
    return mov.multiplier(margin, winner_difference)
