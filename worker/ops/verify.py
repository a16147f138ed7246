"""``ratings verify``: replay a ladder's ledger with the engine and compare with stored ratings."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import RatingPolicy
from engine.fast_replay import replay  # bit-identical to engine.replay.replay (tested), ~10x faster
from worker import store as repository
from worker.mapping import to_engine_match
from worker.store.connection import Connection, snapshot


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a replay: matches replayed, players compared, and every difference found.

    ``differences`` holds ``(player_id, stored (rating, games) or None, replayed (rating, games) or
    None)``; the ladder verifies when it is empty. A stored player the replay never meets (every
    match of theirs annulled) is expected at the initial rating with 0 games.
    """

    ladder: str
    matches: int
    players: int
    differences: list[tuple[str, tuple[float, int] | None, tuple[float, int] | None]] = field(default_factory=list)
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


def verify_ladder(conn: Connection, ladder: str, policy: RatingPolicy) -> VerifyResult:
    """Fold the engine over ``ladder``'s ledger in its replay order from the initial ratings and
    compare with the ``players`` table (ratings compared with ``==``: the replay is bit-exact).

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
        stored = repository.stored_standings(conn, ladder)
        replayed = replay(matches(), in_force)
    differences = []
    for pid in sorted(set(replayed) | set(stored)):
        if pid in replayed:
            want: tuple[float, int] | None = (replayed[pid].rating, replayed[pid].games_played)
        else:  # a stored player the replay never meets: every match of theirs was annulled
            want = (in_force.initial_for(pid), 0) if pid in stored else None
        have = stored.get(pid)
        if want != have:
            differences.append((pid, have, want))
    return VerifyResult(ladder, count, len(stored), differences, in_force.version, policy.version,
                        record.apply_order if record else repository.DEFAULT_ORDER)
