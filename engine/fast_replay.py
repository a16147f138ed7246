"""A fast fold of the engine over many matches, for ``verify`` and rebuilds of large ledgers.

:func:`replay` takes the same arguments and returns the same standings as
:func:`engine.replay.replay`, bit for bit (``tests/unit/test_fast_replay.py`` checks it on
generated Sedma and classic matches, 1v1 and 2v2, with draws, and on arbitrary generated ones).
It gets there without changing any arithmetic:

* no :class:`engine.model.RatingChange` is built per player, and the state is one dict of
  ``[rating, games]`` lists instead of two dicts;
* a 1v1 match between two different players takes a straight-line path; every other match
  (teams, a player listed twice) goes through a general path that repeats :func:`engine.rate`'s
  steps in the same order;
* the Sedma performance adjustment (binary32 arithmetic, a dozen ``struct`` round trips) is
  memoised in nested dicts, base score then bad moves, won by 16, won by 24, won by 4 and last
  (four int-keyed lookups cost less than hashing a fresh 5-tuple; the keys compare as the tuple's
  items would). With whole-number ratings (half-even rounding) the two expected scores are
  memoised by ``rb - ra``: ``ra - rb`` is exactly ``-(rb - ra)`` (IEEE subtraction rounds
  symmetrically; only the sign of a zero differs, and ``10 ** ±0`` is 1), so both are functions
  of that key; a NaN key is never found again. All are pure functions, so a cached value is the
  value. The memos are cleared when they reach :data:`CACHE_LIMIT` entries, so memory stays
  bounded whatever the length of the ledger;
* a banded K of up to three bands is an inline chain of comparisons (:func:`_unrolled_k`, the
  same comparisons as :class:`engine.k_factor.BandedK`, integer bounds as the equal floats);
  more bands are memoised per rating;
* half-even rounding is ``x - math.remainder(x, 1.0)``, which is ``float(round(x))`` for every
  finite ``x`` (the remainder is exact, so the difference is the nearest integer, ties to even,
  and a zero is +0.0 as ``float(0)``); an infinite or NaN ``x`` goes to :func:`round`, which
  raises its own error;
* a 1v1 match is recognised by unpacking its sides (a team raises ``ValueError`` and goes to the
  general path), and a player's state by indexing (a newcomer raises ``KeyError``).

The expected score (with :func:`engine.elo.expected_score`'s saturation at 0 and 1), the update
``R + K * (S - E)`` and the team mean ``sum(r) / len(r)`` are written exactly as :mod:`engine.elo`
and :mod:`engine.rating` write them, and the rounding as :class:`engine.policy.RatingPolicy` does
(or its exact equivalent above), so the same floating-point operations happen in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from engine.elo import expected_score
from engine.fast_glicko2 import Glicko2Replayer
from engine.glicko2 import Glicko2Policy
from engine.k_factor import BandedK, ConstantK, KFactor
from engine.model import FreeForAll, Match, Performance
from engine.policy import AnyPolicy, RatingPolicy, Rounding
from engine.rating import BASE_SCORES, rate
from engine.replay import Standing, replay_changes

CACHE_LIMIT = 65_536
"""Entries per memo (adjusted scores, expected scores, K by rating) before it is cleared."""


def _unrolled_k(k_factor: KFactor) -> tuple[Any, ...] | None:
    """``(b0, k0, b1, k1, b2, k2, top)`` such that ``k0 if r < b0 else k1 if r < b1 else k2 if
    r < b2 else top`` is ``k_factor(r)`` for every float ``r``, or ``None`` (more than three bands).

    A missing band has the bound NaN (``r < nan`` is false); a constant K is ``k`` in every branch.
    A bound is made a float when that is the same number (``r < 1200.0`` is ``r < 1200`` for every
    float ``r``, and cheaper): the comparisons give the same answers, K the same objects.
    """
    nan = math.nan
    if isinstance(k_factor, ConstantK):
        k = k_factor.k
        return (math.inf, k, math.inf, k, math.inf, k, k)
    if not isinstance(k_factor, BandedK) or len(k_factor.bands) > 3:
        return None
    unrolled: list[Any] = []
    for upper, k in k_factor.bands:
        if type(upper) is int:
            try:
                if float(upper) == upper:
                    upper = float(upper)
            except OverflowError:
                pass
        unrolled += (upper, k)
    while len(unrolled) < 6:
        unrolled += (nan, k_factor.top_k)
    return (*unrolled, k_factor.top_k)



class Replayer:
    """Incremental fold: :meth:`feed` matches in apply order (in as many calls as you like), then
    read :meth:`standings`. ``Replayer(policy).feed(m).standings() == engine.replay.replay(m, policy)``.
    """

    __slots__ = ("policy", "matches", "_state", "_k_cache", "_inline_k", "_e_cache", "_scores",
                 "_score_count", "_by_outcome", "_standings")

    def __init__(self, policy: RatingPolicy) -> None:
        self.policy = policy
        self.matches = 0
        """Matches fed so far."""
        self._state: dict[str, list[Any]] = {}
        self._k_cache: dict[float, float] = {}
        self._inline_k = _unrolled_k(policy.k_factor)
        self._e_cache: dict[float, tuple[float, float]] = {}
        # adjusted score per base score, then bad moves, won by 16, won by 24, won by 4 and last
        self._scores: dict[float, dict[Any, Any]] = {base: {} for pair in BASE_SCORES.values() for base in pair}
        self._score_count = 0
        self._by_outcome = {
            outcome: (base_a, base_b, self._scores[base_a], self._scores[base_b])
            for outcome, (base_a, base_b) in BASE_SCORES.items()
        }
        # Policies beyond the fast path (seasons, FIDE K, floors, caps, home advantage, margins,
        # half-away rounding...) fold with engine.replay.replay_changes into full standings.
        fast = policy.is_basic and policy.rounding in (Rounding.NONE, Rounding.HALF_EVEN)
        self._standings: dict[str, Standing] | None = None if fast else {}

    def standings(self) -> dict[str, Standing]:
        """Player id to :class:`engine.replay.Standing`: rating and games played as replay gives
        (the other counts are filled only for policies beyond the fast path)."""
        if self._standings is not None:
            return self._standings
        return {pid: Standing(s[0], s[1]) for pid, s in self._state.items()}

    def ratings(self) -> dict[str, tuple[float, int]]:
        """Player id to ``(rating, games played)``: the form ``verify`` compares with stored rows."""
        if self._standings is not None:
            return {pid: (s.rating, s.games_played) for pid, s in self._standings.items()}
        return {pid: (s[0], s[1]) for pid, s in self._state.items()}

    # -- the per-player pure functions, memoised

    def _k(self, rating: float) -> float:
        k = self._k_cache.get(rating)
        if k is None:
            if len(self._k_cache) >= CACHE_LIMIT:
                self._k_cache.clear()
            k = self._k_cache[rating] = self.policy.k_factor(rating)
        return k

    def _expected_miss(self, ra: float, rb: float) -> tuple[float, float]:
        """The expected scores of A and B, memoised by ``rb - ra`` (see the module docstring)."""
        scale = self.policy.scale
        # engine.elo.expected_score, once from each side (not 1 - E: the same bits as rate()),
        # with its saturation at 0 and 1 where 10 ** x overflows.
        try:
            ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / scale))
        except OverflowError:
            ea = 0.0
        try:
            eb = 1.0 / (1.0 + 10.0 ** ((ra - rb) / scale))
        except OverflowError:
            eb = 0.0
        memo = self._e_cache
        if len(memo) >= CACHE_LIMIT:
            memo.clear()
        memo[rb - ra] = (ea, eb)
        return ea, eb

    def _score_miss(self, base: float, p: Performance) -> float:
        """The adjusted actual score (policy's Sedma adjustment), memoised per base and counts."""
        adjustment = self.policy.performance
        assert adjustment is not None
        if self._score_count >= CACHE_LIMIT:
            for memo in self._scores.values():
                memo.clear()  # in place: the fold holds these dicts
            self._score_count = 0
        score = adjustment.adjusted_score(base, p)
        by_counts = self._scores.get(base)
        if by_counts is None:  # not a base score of BASE_SCORES: not memoised
            return score
        by_counts.setdefault(p.bad_moves, {}).setdefault(p.won_by_16, {}).setdefault(p.won_by_24, {})[
            p.won_by_4_and_last] = score
        self._score_count += 1
        return score

    # -- the fold

    # Complexity above 15 on purpose: the 1v1 fold is one flat loop body. Moving that body into a
    # method (the smallest split that brings this under 15) cost 29-51 % of the speed, measured
    # beside this loop in the same runs (best of 7 to 25, 200,000 matches, four runs): classic Elo
    # 1.75 -> 0.96 and Sedma 1.13 -> 0.77 million matches/s in one of them.
    def feed(self, matches: Iterable[Match | FreeForAll]) -> Replayer:  # noqa: C901
        """Apply ``matches`` in the order given; return ``self``."""
        if self._standings is not None:
            n = 0
            for _ in replay_changes(matches, self.policy, self._standings):
                n += 1
            self.matches += n
            return self
        policy = self.policy
        state = self._state
        initial = policy.initial_rating
        scale = policy.scale
        half_even = policy.rounding is Rounding.HALF_EVEN
        # whole-number ratings repeat their differences: the expected scores are memoised by it
        memo_e = half_even
        e_memo = self._e_cache
        expected_miss = self._expected_miss
        # K inline from at most three bands (a constant K is three bands of one value)
        inline_k = self._inline_k
        if inline_k is not None:
            b0, k0, b1, k1, b2, k2, top = inline_k
        k_of = self._k
        k_get = self._k_cache.get
        plain = policy.performance is None
        by_outcome = self._by_outcome
        score_miss = self._score_miss
        remainder = math.remainder
        general = self._general
        n = 0
        for match in matches:
            n += 1
            if match.__class__ is not Match:
                self._free_for_all(match)
                continue
            try:
                (pa,) = match.side_a
                (pb,) = match.side_b
            except ValueError:  # teams (or an empty side, which the general path refuses)
                general(match)
                continue
            id_a = pa.player_id
            id_b = pb.player_id
            if id_a == id_b:
                general(match)
                continue
            try:
                sa = state[id_a]
                ra = sa[0]
            except KeyError:  # a player's first match
                sa = None
                ra = initial
            try:
                sb = state[id_b]
                rb = sb[0]
            except KeyError:
                sb = None
                rb = initial
            if memo_e:
                try:
                    ea, eb = e_memo[rb - ra]
                except KeyError:
                    ea, eb = expected_miss(ra, rb)
            else:
                # engine.elo.expected_score, once from each side (not 1 - E: the same bits as
                # rate()), with its saturation at 0 and 1 where 10 ** x overflows.
                try:
                    ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / scale))
                except OverflowError:
                    ea = 0.0
                try:
                    eb = 1.0 / (1.0 + 10.0 ** ((ra - rb) / scale))
                except OverflowError:
                    eb = 0.0
            base_a, base_b, memo_a, memo_b = by_outcome[match.outcome]
            if plain:
                s_a = base_a
                s_b = base_b
            else:
                perf = pa.performance
                try:
                    s_a = memo_a[perf.bad_moves][perf.won_by_16][perf.won_by_24][perf.won_by_4_and_last]
                except KeyError:
                    s_a = score_miss(base_a, perf)
                perf = pb.performance
                try:
                    s_b = memo_b[perf.bad_moves][perf.won_by_16][perf.won_by_24][perf.won_by_4_and_last]
                except KeyError:
                    s_b = score_miss(base_b, perf)
            if inline_k is not None:
                # BandedK.__call__, unrolled: the first band whose bound is above the rating
                ka = k0 if ra < b0 else k1 if ra < b1 else k2 if ra < b2 else top
                kb = k0 if rb < b0 else k1 if rb < b1 else k2 if rb < b2 else top
            else:
                ka = k_get(ra)
                if ka is None:
                    ka = k_of(ra)
                kb = k_get(rb)
                if kb is None:
                    kb = k_of(rb)
            # engine.elo.update, then RatingPolicy.round
            new_a = ra + ka * (s_a - ea)
            new_b = rb + kb * (s_b - eb)
            if half_even:
                # float(round(x)) is x - remainder(x, 1.0) for every finite x (one C call for
                # two); an infinite or NaN x goes to round() for its own error
                try:
                    x = new_a - remainder(new_a, 1.0)
                    y = new_b - remainder(new_b, 1.0)
                except ValueError:
                    x = float(round(new_a))
                    y = float(round(new_b))
                if x != x or y != y:
                    x = float(round(new_a))
                    y = float(round(new_b))
                new_a = x
                new_b = y
            if sa is None:
                state[id_a] = [new_a, 1]
            else:
                sa[0] = new_a
                sa[1] += 1
            if sb is None:
                state[id_b] = [new_b, 1]
            else:
                sb[0] = new_b
                sb[1] += 1
        self.matches += n
        return self

    def _free_for_all(self, match: Match | FreeForAll) -> None:
        """A match of more than two sides: :func:`engine.rate` itself (K by rating only here)."""
        state = self._state
        ratings = {pid: state[pid][0] for pid in match.player_ids() if pid in state}
        for change in rate(match, ratings, self.policy):
            s = state.get(change.player_id)
            if s is None:
                state[change.player_id] = [change.rating_after, 1]
            else:
                s[0] = change.rating_after
                s[1] += 1

    def _general(self, match: Match) -> None:
        """Any match: the steps of :func:`engine.rate`, then the updates in its order."""
        actual: float | None
        policy = self.policy
        state = self._state
        get = state.get
        initial = policy.initial_rating
        before_a = []
        for p in match.side_a:
            s = get(p.player_id)
            before_a.append(initial if s is None else s[0])
        before_b = []
        for p in match.side_b:
            s = get(p.player_id)
            before_b.append(initial if s is None else s[0])
        if not before_a or not before_b:
            raise ValueError("a side needs at least one player")
        # the mean side rating and expected score, as engine.rating writes them
        side_a = before_a[0] if len(before_a) == 1 else sum(before_a) / len(before_a)
        side_b = before_b[0] if len(before_b) == 1 else sum(before_b) / len(before_b)
        expected_a = expected_score(side_a, side_b, policy.scale)
        expected_b = expected_score(side_b, side_a, policy.scale)
        base_a, base_b = BASE_SCORES[match.outcome]
        half_even = policy.rounding is Rounding.HALF_EVEN
        plain = policy.performance is None
        constant_k = policy.k_factor.k if isinstance(policy.k_factor, ConstantK) else None
        k_get = self._k_cache.get
        scores = self._scores
        afters = []
        for players, befores, expected, base in (
            (match.side_a, before_a, expected_a, base_a),
            (match.side_b, before_b, expected_b, base_b),
        ):
            for participant, before in zip(players, befores):
                if constant_k is None:
                    k = k_get(before)
                    if k is None:
                        k = self._k(before)
                else:
                    k = constant_k
                if plain:
                    actual = base
                else:
                    perf = participant.performance
                    try:
                        actual = scores[base][perf.bad_moves][perf.won_by_16][perf.won_by_24][perf.won_by_4_and_last]
                    except KeyError:
                        actual = self._score_miss(base, perf)
                after = before + k * (actual - expected)  # engine.elo.update, then RatingPolicy.round
                afters.append((participant.player_id, float(round(after)) if half_even else after))
        for pid, after in afters:
            s = get(pid)
            if s is None:
                state[pid] = [after, 1]
            else:
                s[0] = after
                s[1] += 1


class ChangesReplayer:
    """The fold for a policy without a fast path (a model with uncertainty other than Glicko-2):
    :func:`engine.replay.replay_changes` behind the :class:`Replayer` interface."""

    __slots__ = ("policy", "matches", "_standings")

    def __init__(self, policy: AnyPolicy) -> None:
        self.policy = policy
        self.matches = 0
        self._standings: dict[str, Standing] = {}

    def feed(self, matches: Iterable[Match | FreeForAll]) -> ChangesReplayer:
        """Apply ``matches`` in the order given; return ``self``."""
        for _ in replay_changes(matches, self.policy, self._standings):
            self.matches += 1
        return self

    def standings(self) -> dict[str, Standing]:
        """Player id to :class:`engine.replay.Standing`."""
        return self._standings

    def ratings(self) -> dict[str, tuple[float, int]]:
        """Player id to ``(rating, games played)``."""
        return {pid: (s.rating, s.games_played) for pid, s in self._standings.items()}


def replayer(policy: AnyPolicy) -> Replayer | Glicko2Replayer | ChangesReplayer:
    """The fastest fold for ``policy``: :class:`Replayer` for an Elo-family policy,
    :class:`engine.fast_glicko2.Glicko2Replayer` for Glicko-2, :class:`ChangesReplayer` otherwise.
    All give :func:`engine.replay.replay`'s standings bit for bit."""
    if isinstance(policy, RatingPolicy):
        return Replayer(policy)
    if isinstance(policy, Glicko2Policy):
        return Glicko2Replayer(policy)
    return ChangesReplayer(policy)


def replay(matches: Iterable[Match | FreeForAll], policy: AnyPolicy) -> dict[str, Standing]:
    """Apply ``matches`` in the order given from every player's initial rating.

    The same result as :func:`engine.replay.replay` (bit-identical ratings, same games played),
    several times faster; see the module docstring for how (and :mod:`engine.fast_glicko2`).
    """
    return replayer(policy).feed(matches).standings()
