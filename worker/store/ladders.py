"""Store: ladders and policies (the policy in force per ladder, recorded policy versions, the ladder advisory lock)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine.policy import AnyPolicy
from worker.policy.shapes import MatchShapes
from worker.policy.stored import PolicyUnavailable, cached_policy, policy_from_content

LADDER_LOCK_CLASS = 7_401


"""First key of the per-ladder advisory lock: every rating transaction takes it shared, a rebuild's
switch-over takes it exclusive (``pg_advisory_xact_lock(LADDER_LOCK_CLASS, hashtext(ladder))``)."""
@dataclass(frozen=True, slots=True)
class LadderPolicy:
    """A ladder's policy as configured in this process's ladders file, loaded once: the engine
    ``policy``, its canonical ``content`` (recorded as the ladder's policy in force the first time
    a match of the ladder is rated; ``None``: record nothing) and so its ``version``; the match
    ``shapes`` it rates."""

    ladder: str
    policy: AnyPolicy
    content: dict[str, Any] | None = None
    shapes: MatchShapes | None = None
    """The match shapes the ladder rates (:mod:`worker.policy.shapes`, from the ladders file);
    ``None``: not checked (a ladder built in code rather than read from a ladders file)."""

    @property
    def version(self) -> str | None:
        """The policy's version (a hash of its canonical content), ``None`` if it has none."""
        return self.policy.version or None


@dataclass(frozen=True, slots=True)
class LadderRecord:
    """A ladder's row of ``ladders``: the policy version in force, the current history
    ``generation`` (0 until the first rebuild), and the replay order: ``apply_order`` is
    ``"applied"`` (ledger ``seq``, arrival order) or ``"finished-at"`` (chronological: by
    ``(order_at, match_id)``, see :data:`worker.store.read_models.LEDGER_ORDER`)."""

    ladder: str
    policy_version: str
    generation: int
    apply_order: str
    order_boundary: int | None


def ladder_record(conn: psycopg.Connection | psycopg.Cursor, ladder: str) -> LadderRecord | None:
    """The ladder's row of ``ladders``, or ``None`` when no policy was recorded for it yet."""
    row = conn.execute(
        "SELECT ladder, policy_version, generation, apply_order, order_boundary FROM ladders WHERE ladder = %s",
        (ladder,),
    ).fetchone()
    return LadderRecord(*row) if row else None


def ladder_records(cur: psycopg.Cursor, ladders: Sequence[str]) -> dict[str, LadderRecord]:
    """The rows of ``ladders`` for each of ``ladders`` that has one, in one statement."""
    return {row[0]: LadderRecord(*row) for row in cur.execute(
        "SELECT ladder, policy_version, generation, apply_order, order_boundary FROM ladders WHERE ladder = ANY(%b)",
        (list(ladders),))}


def stored_policy(conn: psycopg.Connection | psycopg.Cursor, version: str) -> AnyPolicy:
    """The engine policy recorded as ``version`` in ``policies`` (cached per process).

    Raises :class:`worker.policy.stored.PolicyUnavailable` when the version is not recorded or its
    content does not validate in this release.
    """
    policy = cached_policy(version)
    if policy is not None:
        return policy
    row = conn.execute("SELECT content FROM policies WHERE version = %s", (version,)).fetchone()
    if row is None:
        raise PolicyUnavailable(f"policy version {version} is named in `ladders` but not recorded in `policies`")
    return policy_from_content(version, row[0])


def record_policy(conn: psycopg.Connection | psycopg.Cursor, ladder: str, policy: AnyPolicy,
                  content: dict[str, Any]) -> None:
    """Keep ``content`` as policy ``policy.version`` in ``policies`` (no-op when already there)."""
    conn.execute(
        "INSERT INTO policies (version, ladder, content) VALUES (%s, %s, %s) ON CONFLICT (version) DO NOTHING",
        (policy.version, ladder, Jsonb(content)),
    )


def policy_in_force(
    cur: psycopg.Cursor, ladder: str, configured: AnyPolicy, content: dict[str, Any] | None = None
) -> tuple[AnyPolicy, int]:
    """The policy to rate ``ladder`` under now and the current history generation.

    The version named in ``ladders`` wins (``configured`` when it is that version, else read from
    ``policies``). A ladder with no row yet gets one for ``configured`` when its ``content`` is
    given (the first worker to rate a ladder records its policy; a concurrent first one finds
    that row); without ``content`` it is rated under ``configured``, generation 0. Call it inside
    the rating transaction, after the ladder's shared advisory lock. Raises
    :class:`worker.policy.stored.PolicyUnavailable` (transient) when the recorded policy cannot be read.
    """
    policy, generation, _ = ladder_in_force(cur, ladder, configured, content)
    return policy, generation


DEFAULT_ORDER = "finished-at"
"""The replay order of a ladder with no recorded one: chronological, so that the same matches give the same
ratings (``docs/decisions/0008-chronological-order.md``)."""


def ladder_in_force(
    cur: psycopg.Cursor, ladder: str, configured: AnyPolicy, content: dict[str, Any] | None = None,
    records: dict[str, LadderRecord] | None = None,
) -> tuple[AnyPolicy, int, str]:
    """:func:`policy_in_force` and the ladder's replay order (``"finished-at"``: chronological, the
    default; ``"applied"``: arrival order, an explicit choice made with ``ratings rebuild --order``).
    ``records``: the ladders' rows as :func:`ladder_records` read them in this transaction (else
    the row is read here)."""
    record = records.get(ladder) if records is not None else ladder_record(cur, ladder)
    if record is None:
        if content is None or not configured.version:
            return configured, 0, DEFAULT_ORDER
        record_policy(cur, ladder, configured, content)
        cur.execute(
            "INSERT INTO ladders (ladder, policy_version) VALUES (%s, %s) ON CONFLICT (ladder) DO NOTHING",
            (ladder, configured.version),
        )
        record = ladder_record(cur, ladder)
        assert record is not None
    if record.policy_version == configured.version:
        return configured, record.generation, record.apply_order
    return stored_policy(cur, record.policy_version), record.generation, record.apply_order


def record_policies(conn: psycopg.Connection, policies: dict[str, tuple[str, dict[str, Any]]]) -> None:
    """Store each ladder's policy content under its version (``{ladder: (version, content)}``);
    a version already stored is left as it is."""
    with conn.transaction():
        for ladder, (version, content) in policies.items():
            conn.execute(
                "INSERT INTO policies (version, ladder, content) VALUES (%s, %s, %s) ON CONFLICT (version) DO NOTHING",
                (version, ladder, Jsonb(content)),
            )
