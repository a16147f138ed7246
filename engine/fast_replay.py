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
  memoised per (base score, performance), and a banded K per rating: both are pure functions,
  so a cached value is the value. The caches are cleared when they reach
  :data:`CACHE_LIMIT` entries, so memory stays bounded whatever the length of the ledger.

The expected score (with :func:`engine.elo.expected_score`'s saturation at 0 and 1), the update
``R + K * (S - E)``, the team mean ``sum(r) / len(r)`` and the rounding are written exactly as :mod:`engine.elo`,
:mod:`engine.rating` and
:class:`engine.policy.RatingPolicy` write them, so the same floating-point operations happen in
the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.elo import expected_score
from engine.k_factor import ConstantK
from engine.model import FreeForAll, Match, Participant
from engine.policy import RatingPolicy, Rounding
from engine.rating import BASE_SCORES, rate
from engine.replay import Standing, replay_changes

CACHE_LIMIT = 65_536
"""Entries per memo (adjusted scores, K by rating) before it is cleared."""



class Replayer:
    """Incremental fold: :meth:`feed` matches in apply order (in as many calls as you like), then
    read :meth:`standings`. ``Replayer(policy).feed(m).standings() == engine.replay.replay(m, policy)``.
    """

    __slots__ = ("policy", "matches", "_state", "_k_cache", "_adj_cache", "_standings")

    def __init__(self, policy: RatingPolicy) -> None:
        self.policy = policy
        self.matches = 0
        """Matches fed so far."""
        self._state: dict[str, list[Any]] = {}
        self._k_cache: dict[float, float] = {}
        self._adj_cache: dict[tuple[Any, ...], float] = {}
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

    def _actual(self, base: float, participant: Participant) -> float:
        adjustment = self.policy.performance
        if adjustment is None:
            return base
        p = participant.performance
        key = (base, p.bad_moves, p.won_by_16, p.won_by_24, p.won_by_4_and_last)
        score = self._adj_cache.get(key)
        if score is None:
            if len(self._adj_cache) >= CACHE_LIMIT:
                self._adj_cache.clear()
            score = self._adj_cache[key] = adjustment.adjusted_score(base, participant.performance)
        return score

    # -- the fold

    def feed(self, matches: Iterable[Match | FreeForAll]) -> Replayer:
        """Apply ``matches`` in the order given; return ``self``."""
        if self._standings is not None:
            n = 0
            for _ in replay_changes(matches, self.policy, self._standings):
                n += 1
            self.matches += n
            return self
        policy = self.policy
        state = self._state
        get = state.get
        initial = policy.initial_rating
        scale = policy.scale
        half_even = policy.rounding is Rounding.HALF_EVEN
        constant_k = policy.k_factor.k if isinstance(policy.k_factor, ConstantK) else None
        k_of = self._k
        plain = policy.performance is None
        actual_of = self._actual
        adj_get = self._adj_cache.get
        k_get = self._k_cache.get
        general = self._general
        n = 0
        s_a: float | None
        s_b: float | None
        for match in matches:
            n += 1
            if match.__class__ is not Match:
                self._free_for_all(match)
                continue
            side_a = match.side_a
            side_b = match.side_b
            if len(side_a) != 1 or len(side_b) != 1:
                general(match)
                continue
            pa = side_a[0]
            pb = side_b[0]
            id_a = pa.player_id
            id_b = pb.player_id
            if id_a == id_b:
                general(match)
                continue
            sa = get(id_a)
            sb = get(id_b)
            ra = initial if sa is None else sa[0]
            rb = initial if sb is None else sb[0]
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
            base_a, base_b = BASE_SCORES[match.outcome]
            if plain:
                s_a, s_b = base_a, base_b
            else:
                perf = pa.performance
                s_a = adj_get((base_a, perf.bad_moves, perf.won_by_16, perf.won_by_24, perf.won_by_4_and_last))
                if s_a is None:
                    s_a = actual_of(base_a, pa)
                perf = pb.performance
                s_b = adj_get((base_b, perf.bad_moves, perf.won_by_16, perf.won_by_24, perf.won_by_4_and_last))
                if s_b is None:
                    s_b = actual_of(base_b, pb)
            if constant_k is None:
                ka = k_get(ra)
                if ka is None:
                    ka = k_of(ra)
                kb = k_get(rb)
                if kb is None:
                    kb = k_of(rb)
            else:
                ka = kb = constant_k
            # engine.elo.update, then RatingPolicy.round
            new_a = ra + ka * (s_a - ea)
            new_b = rb + kb * (s_b - eb)
            if half_even:
                new_a = float(round(new_a))
                new_b = float(round(new_b))
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
        adj_get = self._adj_cache.get
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
                    actual = adj_get((base, perf.bad_moves, perf.won_by_16, perf.won_by_24, perf.won_by_4_and_last))
                    if actual is None:
                        actual = self._actual(base, participant)
                after = before + k * (actual - expected)  # engine.elo.update, then RatingPolicy.round
                afters.append((participant.player_id, float(round(after)) if half_even else after))
        for pid, after in afters:
            s = get(pid)
            if s is None:
                state[pid] = [after, 1]
            else:
                s[0] = after
                s[1] += 1


def replay(matches: Iterable[Match | FreeForAll], policy: RatingPolicy) -> dict[str, Standing]:
    """Apply ``matches`` in the order given from every player's initial rating.

    The same result as :func:`engine.replay.replay` (bit-identical ratings, same games played),
    several times faster; see the module docstring for how.
    """
    return Replayer(policy).feed(matches).standings()
