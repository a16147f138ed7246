"""``ratings verify``: replay a ladder's ledger with the engine and compare with stored ratings."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import RatingPolicy
from engine.fast_replay import replay as fast_replay  # bit-identical to engine.replay.replay (tested)
from engine.policy import AnyPolicy
from engine.replay import Standing
from worker import store as repository
from worker.mapping import to_engine_match
from worker.store.connection import Connection, snapshot
from worker.store.players import initial_state


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a replay: matches replayed, players compared, and every difference found.

    ``differences`` holds ``(player_id, stored (rating, games) or None, replayed (rating, games) or
    None)``; on a ladder of a model with uncertainty each state is ``(rating, games, deviation,
    volatility, last_played)``. The ladder verifies when it is empty. A stored player the replay
    never meets (every match of theirs annulled) is expected at the initial state with 0 games.
    """

    ladder: str
    matches: int
    players: int
    differences: list[tuple[str, tuple[float | int | None, ...] | None, tuple[float | int | None, ...] | None]] = (
        field(default_factory=list))
    policy_version: str = ""
    """The version replayed under: the policy in force for the ladder (recorded in ``ladders``)."""
    configured_version: str = ""
    """The version of the policy passed in (the ladders file's); differs from ``policy_version``
    until ``ratings rebuild`` switches the ladder to it."""
    apply_order: str = "applied"
    """The replay order recorded for the ladder (``applied`` or ``finished-at``)."""

    @property
    def ok(self) -> bool:
        """True when every stored rating and game count equals the replayed one exactly."""
        return not self.differences


def verify_ladder(conn: Connection, ladder: str, policy: AnyPolicy) -> VerifyResult:
    """Fold the engine over ``ladder``'s ledger in its replay order from the initial ratings and
    compare with the ``players`` table (ratings compared with ``==``: the replay is bit-exact; on a
    ladder of a model with uncertainty the deviation, volatility and time of the last match too).
    The replay is :func:`engine.fast_replay.replay` (its fast fold for Elo and Glicko-2,
    :func:`engine.replay.replay_changes` for the Weng-Lin models).

    The replay runs under the policy in force for the ladder (the version recorded in ``ladders``,
    which workers rate under and ``ratings rebuild`` switches), or under ``policy`` (the ladders
    file's) for a ladder with no recorded policy. The replay order is the one recorded for the
    ladder (chronological unless a rebuild chose ``--order applied``). The ledger, the ladder's
    record and the players are read in one REPEATABLE READ transaction (one snapshot), so the check is exact while
    workers keep applying matches and while a rebuild switches over. ``conn`` must not be inside a
    transaction. Raises :class:`worker.policy.stored.PolicyUnavailable` when the recorded policy cannot
    be read by this release.
    """
    count = 0

    def matches():
        nonlocal count
        for payload in repository.iter_ledger(conn, ladder):
            count += 1
            yield to_engine_match(payload)

    with snapshot(conn):
        record = repository.ladder_record(conn, ladder)
        in_force = policy
        if record is not None and record.policy_version != policy.version:
            in_force = repository.stored_policy(conn, record.policy_version)
        if isinstance(in_force, RatingPolicy):
            stored: dict[str, tuple] = dict(repository.stored_standings(conn, ladder))
        else:
            stored = dict(repository.stored_states(conn, ladder))
        replayed = fast_replay(matches(), in_force)
    differences = []
    for pid in sorted(set(replayed) | set(stored)):
        if pid in replayed:
            want: tuple | None = _state(replayed[pid], in_force)
        else:  # a stored player the replay never meets: every match of theirs was annulled
            want = _initial(in_force, pid) if pid in stored else None
        have = stored.get(pid)
        if want != (tuple(have) if have is not None else None):
            differences.append((pid, have, want))
    return VerifyResult(ladder, count, len(stored), differences, in_force.version, policy.version,
                        record.apply_order if record else repository.DEFAULT_ORDER)


def _state(standing: Standing, policy: AnyPolicy) -> tuple:
    """What verify compares of a replayed player: (rating, games), and under a model with
    uncertainty its deviation, volatility and last match time too."""
    if isinstance(policy, RatingPolicy):
        return (standing.rating, standing.games_played)
    return (standing.rating, standing.games_played, standing.deviation, standing.volatility, standing.last_played)


def _initial(policy: AnyPolicy, player_id: str) -> tuple:
    """The expected state of a stored player every match of whom was annulled."""
    state = initial_state(policy, player_id)
    return _state(Standing(state.rating, 0, deviation=state.deviation, volatility=state.volatility), policy)
