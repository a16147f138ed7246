"""A fast fold of a :class:`engine.glicko2.Glicko2Policy` over many matches (verify, rebuilds, bench).

:class:`Glicko2Replayer` gives the standings :func:`engine.replay.replay` gives under the same
policy, bit for bit (``tests/unit/test_fast_glicko2.py`` compares them with ``==`` on generated
ledgers of 1v1 matches with draws, teams, free-for-all and partial play). It changes no arithmetic:

* a 1v1 match between two different players takes a straight-line path that repeats
  :meth:`Glicko2Policy.grown_deviation`, the one-game sums of :func:`engine.glicko2._period` and
  :meth:`Glicko2Policy.rate`'s bounds as the same expressions in the same order, and calls the same
  :func:`engine.glicko2._finish` (steps 5 to 7). The sums start from ``0.0`` there and from the
  one term here: ``0.0 + x`` is ``x`` for every ``x`` but ``-0.0``, and neither term is ever
  ``-0.0`` (``w g g E (1 - E)`` is positive or ``+0.0``; ``w g (s - E)`` is ``+0.0`` when
  ``s == E``, since ``x - x`` is ``+0.0``). A side of one player is its own composite, so no
  averaging happens in either path;
* a two-sided match of teams takes :meth:`Glicko2Replayer._teams`, the policy's steps without
  its :class:`engine.model.RatingChange` (the same helpers for the grown deviation and the
  composite, the same sums, :func:`engine.glicko2._finish`);
* every other match (free-for-all, a player listed twice, a weight out of range, which raises)
  goes through :func:`engine.replay.replay_changes` on the same standings;
* no :class:`engine.model.RatingChange` is built on the fast path, and the policy's parameters are
  read once per :meth:`Glicko2Replayer.feed`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from engine.glicko2 import _PI_SQUARED, CENTRE, SCALE, SECONDS_PER_DAY, Glicko2Policy, _composite, _finish
from engine.model import FreeForAll, Match, Outcome
from engine.replay import Standing, replay_changes

_SCORES = {Outcome.SIDE_A_WON: (1.0, 0.0), Outcome.SIDE_B_WON: (0.0, 1.0), Outcome.DRAW: (0.5, 0.5)}


class Glicko2Replayer:
    """Incremental fold: :meth:`feed` matches in apply order (in as many calls as you like), then
    read :meth:`standings`. ``Glicko2Replayer(policy).feed(m).standings() ==
    engine.replay.replay(m, policy)``.
    """

    __slots__ = ("policy", "matches", "_standings")

    def __init__(self, policy: Glicko2Policy) -> None:
        self.policy = policy
        self.matches = 0
        """Matches fed so far."""
        self._standings: dict[str, Standing] = {}

    def standings(self) -> dict[str, Standing]:
        """Player id to :class:`engine.replay.Standing`, every field as :func:`engine.replay.replay` gives."""
        return self._standings

    def ratings(self) -> dict[str, tuple[float, int]]:
        """Player id to ``(rating, games played)``."""
        return {pid: (s.rating, s.games_played) for pid, s in self._standings.items()}

    # Complexity above 15 on purpose: the 1v1 fold is one flat loop body, as in engine.fast_replay
    # (a helper call per player costs a large share of the speed the bench reports).
    def feed(self, matches: Iterable[Match | FreeForAll]) -> Glicko2Replayer:  # noqa: C901
        """Apply ``matches`` in the order given; return ``self``. Raises what :meth:`Glicko2Policy.rate`
        raises for a match it refuses."""
        policy = self.policy
        standings = self._standings
        get = standings.get
        sqrt = math.sqrt
        exp = math.exp
        finish = _finish
        scores = _SCORES
        initial_rating = policy.initial_rating
        initial_deviation = policy.initial_deviation
        initial_volatility = policy.initial_volatility
        initial_capped = initial_deviation if initial_deviation <= policy.max_deviation else policy.max_deviation
        per_second = policy.periods_per_day
        max_deviation = policy.max_deviation
        min_deviation = policy.min_deviation
        max_volatility = policy.max_volatility
        cap = policy.max_rating_change
        tau = policy.tau
        epsilon = policy.epsilon
        n = 0
        for match in matches:
            n += 1
            if match.__class__ is not Match:
                for _ in replay_changes((match,), policy, standings):
                    pass
                continue
            try:
                (pa,) = match.side_a
                (pb,) = match.side_b
            except ValueError:  # teams, or an empty side (refused by the policy)
                if not self._teams(match):
                    for _ in replay_changes((match,), policy, standings):
                        pass
                continue
            id_a = pa.player_id
            id_b = pb.player_id
            wa = pa.weight
            wb = pb.weight
            if id_a == id_b or not (0 < wa <= 1 and 0 < wb <= 1):
                for _ in replay_changes((match,), policy, standings):
                    pass
                continue
            at = match.played_at
            score_a, score_b = scores[match.outcome]
            # Glicko2Policy.grown_deviation for each player (a newcomer: the initial state), written
            # out for side A and again for side B: a function call per player would cost this loop a
            # large share of its 1v1 rate, which ratings bench measures against Elo's fast replay
            sa = get(id_a)
            if sa is None:
                ra = initial_rating
                va = initial_volatility
                da = initial_capped
            else:
                ra = sa.rating
                stored_deviation = sa.deviation
                stored_volatility = sa.volatility
                # a standing without Glicko-2 state (only from a caller's own standings): the policy's path
                if stored_deviation is None or stored_volatility is None:
                    for _ in replay_changes((match,), policy, standings):
                        pass
                    continue
                da = stored_deviation
                va = stored_volatility
                last = sa.last_played
                if at is not None and last is not None and at > last:
                    periods = (at - last) / SECONDS_PER_DAY * per_second
                    phi = da / SCALE
                    da = sqrt(phi * phi + periods * va * va) * SCALE
                if not da <= max_deviation:
                    da = max_deviation
            sb = get(id_b)
            if sb is None:
                rb = initial_rating
                vb = initial_volatility
                db = initial_capped
            else:
                rb = sb.rating
                stored_deviation = sb.deviation
                stored_volatility = sb.volatility
                if stored_deviation is None or stored_volatility is None:
                    for _ in replay_changes((match,), policy, standings):
                        pass
                    continue
                db = stored_deviation
                vb = stored_volatility
                last = sb.last_played
                if at is not None and last is not None and at > last:
                    periods = (at - last) / SECONDS_PER_DAY * per_second
                    phi = db / SCALE
                    db = sqrt(phi * phi + periods * vb * vb) * SCALE
                if not db <= max_deviation:
                    db = max_deviation
            mu_a = (ra - CENTRE) / SCALE
            phi_a = da / SCALE
            mu_b = (rb - CENTRE) / SCALE
            phi_b = db / SCALE
            # A's game against B, then B's against A: engine.glicko2._period's sums for one game
            try:
                g = 1.0 / sqrt(1.0 + 3.0 * phi_b * phi_b / _PI_SQUARED)
                e = 1.0 / (1.0 + exp(-g * (mu_a - mu_b)))
                change, phi_new, vol_a = finish(phi_a, va, 1.0 / (wa * g * g * e * (1.0 - e)), wa * g * (score_a - e),
                                                tau, epsilon, 0.0)
                after_a = ra + change * SCALE
                dev_a = phi_new * SCALE
                g = 1.0 / sqrt(1.0 + 3.0 * phi_a * phi_a / _PI_SQUARED)
                e = 1.0 / (1.0 + exp(-g * (mu_b - mu_a)))
                change, phi_new, vol_b = finish(phi_b, vb, 1.0 / (wb * g * g * e * (1.0 - e)), wb * g * (score_b - e),
                                                tau, epsilon, 0.0)
                after_b = rb + change * SCALE
                dev_b = phi_new * SCALE
            except (ZeroDivisionError, OverflowError):  # a certain expected score: the policy's path refuses it
                for _ in replay_changes((match,), policy, standings):
                    pass
                continue
            # Glicko2Policy's bounds: min(max(d, low), high) and min(sigma, high), as comparisons
            if cap is not None:
                if after_a - ra > cap:
                    after_a = ra + cap
                elif ra - after_a > cap:
                    after_a = ra - cap
                if after_b - rb > cap:
                    after_b = rb + cap
                elif rb - after_b > cap:
                    after_b = rb - cap
            if min_deviation > dev_a:
                dev_a = min_deviation
            if max_deviation < dev_a:
                dev_a = max_deviation
            if min_deviation > dev_b:
                dev_b = min_deviation
            if max_deviation < dev_b:
                dev_b = max_deviation
            if max_volatility < vol_a:
                vol_a = max_volatility
            if max_volatility < vol_b:
                vol_b = max_volatility
            # engine.replay.replay_changes's bookkeeping
            season = match.season
            if sa is None:
                sa = standings[id_a] = Standing(ra, 0, ra)
            sa.rating = after_a
            sa.games_played += 1
            if after_a > sa.peak_rating:  # type: ignore[operator]
                sa.peak_rating = after_a
            if season is not None:
                sa.season = season
            sa.deviation = dev_a
            sa.volatility = vol_a
            sa.last_played = at
            if sb is None:
                sb = standings[id_b] = Standing(rb, 0, rb)
            sb.rating = after_b
            sb.games_played += 1
            if after_b > sb.peak_rating:  # type: ignore[operator]
                sb.peak_rating = after_b
            if season is not None:
                sb.season = season
            sb.deviation = dev_b
            sb.volatility = vol_b
            sb.last_played = at
            if score_a == 0.5:
                sa.draws += 1
                sb.draws += 1
            elif score_a == 1.0:
                sa.wins += 1
                sb.losses += 1
            else:
                sa.losses += 1
                sb.wins += 1
        self.matches += n
        return self

    def _teams(self, match: Match) -> bool:
        """A two-sided match of teams, as :meth:`Glicko2Policy.rate` rates it: each player's one
        game against the other side's :func:`engine.glicko2._composite`. Returns ``False``, having
        changed nothing, for a match this path leaves to the policy (an empty side, a player listed
        twice, a weight out of range, a standing without Glicko-2 state)."""
        policy = self.policy
        standings = self._standings
        at = match.played_at
        sides = (match.side_a, match.side_b)
        ids = [p.player_id for side in sides for p in side]
        if not match.side_a or not match.side_b or len(set(ids)) != len(ids):
            return False
        members: list[list[tuple[str, float, Standing | None, float, float, float, float]]] = []
        for side in sides:
            rows = []
            for participant in side:
                weight = participant.weight
                if not 0 < weight <= 1:
                    return False
                standing = standings.get(participant.player_id)
                if standing is None:
                    state = policy.initial_state(participant.player_id)
                elif standing.deviation is None or standing.volatility is None:
                    return False
                else:
                    state = standing.state()
                sigma = policy.initial_volatility if state.volatility is None else state.volatility
                rows.append((participant.player_id, weight, standing, state.rating,
                             (state.rating - CENTRE) / SCALE, policy.grown_deviation(state, at) / SCALE, sigma))
            members.append(rows)
        composites = [_composite([m[4] for m in rows], [m[5] for m in rows]) for rows in members]
        score_a, score_b = _SCORES[match.outcome]
        updates = []
        for rows, (mu_j, phi_j), score in ((members[0], composites[1], score_a), (members[1], composites[0], score_b)):
            # engine.glicko2._period's sums for one game, then Glicko2Policy's bounds
            g = 1.0 / math.sqrt(1.0 + 3.0 * phi_j * phi_j / _PI_SQUARED)
            for pid, weight, standing, rating, mu, phi, sigma in rows:
                try:
                    e = 1.0 / (1.0 + math.exp(-g * (mu - mu_j)))
                except OverflowError:
                    return False  # a certain expected score: the policy's path refuses the match
                information = weight * g * g * e * (1.0 - e)
                if information == 0.0:
                    return False
                change, phi_new, sigma_new = _finish(phi, sigma, 1.0 / information,
                                                     weight * g * (score - e), policy.tau, policy.epsilon, 0.0)
                after = _capped(rating, rating + change * SCALE, policy.max_rating_change)
                updates.append((pid, standing, rating, after,
                                min(max(phi_new * SCALE, policy.min_deviation), policy.max_deviation),
                                min(sigma_new, policy.max_volatility), score))
        _apply(standings, updates, match)
        return True


def _apply(
    standings: dict[str, Standing],
    updates: list[tuple[str, Standing | None, float, float, float, float, float]],
    match: Match,
) -> None:
    """:func:`engine.replay.replay_changes`'s bookkeeping of ``(player id, standing or None, rating
    before, rating after, deviation, volatility, score)`` rows, in order."""
    at = match.played_at
    for pid, standing, rating, after, deviation, volatility, score in updates:
        if standing is None:
            standing = standings[pid] = Standing(rating, 0, rating)
        standing.rating = after
        standing.games_played += 1
        standing.peak_rating = max(standing.peak_rating, after)  # type: ignore[type-var]
        if match.season is not None:
            standing.season = match.season
        standing.deviation = deviation
        standing.volatility = volatility
        standing.last_played = at
        if score == 0.5:
            standing.draws += 1
        elif score == 1.0:
            standing.wins += 1
        else:
            standing.losses += 1


def _capped(before: float, after: float, cap: float | None) -> float:
    """``after`` within ``cap`` rating points of ``before``, as :meth:`Glicko2Policy.rate` bounds it."""
    if cap is not None:
        if after - before > cap:
            return before + cap
        if before - after > cap:
            return before - cap
    return after


def replay(matches: Iterable[Match | FreeForAll], policy: Glicko2Policy) -> dict[str, Standing]:
    """Apply ``matches`` in the order given from every player's initial state: the standings of
    :func:`engine.replay.replay` under ``policy``, bit for bit, faster (see the module docstring)."""
    return Glicko2Replayer(policy).feed(matches).standings()
