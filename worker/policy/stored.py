"""Policies as recorded in the database: from a ladder's stored content to an engine policy.

The ``policies`` table keeps each policy version's canonical content (the rating-relevant keys of
a policy, :meth:`worker.policy.config.PolicyConfig.canonical`), and the
``ladders`` table names the version in force for each ladder. Workers and ``verify`` rate under
the version in force, which ``ratings rebuild`` switches; this module turns a stored version back
into a :data:`engine.policy.AnyPolicy` (cached per process: a version's content never changes).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import psycopg

from engine.policy import AnyPolicy
from worker.policy.config import config_of
from worker.policy.ladders import LadderConfigError, load_ladder_policies  # noqa: F401 (re-exported error)


class PolicyUnavailable(psycopg.OperationalError):
    """The policy in force for a ladder cannot be read by this process: its version is not in
    ``policies``, or its content does not validate here (recorded by a newer release).

    A subclass of ``psycopg.OperationalError`` on purpose: the worker treats it as transient, so
    the message is retried and requeued (never dead-lettered) until a worker that can read the
    policy takes it.
    """


_CACHE: dict[str, AnyPolicy] = {}


def ladder_contents(path: Path) -> dict[str, dict[str, Any]]:
    """Mapping of ladder name to the canonical content of its policy in the ladders file at ``path``
    (what ``policies.content`` stores; its hash is the policy version).

    Raises :class:`worker.policy.ladders.LadderConfigError` naming the file, line and key, as
    ``load_ladders`` does.
    """
    return {name: loaded.config.canonical() for name, loaded in load_ladder_policies(path).items()}


def policy_from_content(version: str, content: dict[str, Any]) -> AnyPolicy:
    """The engine policy of stored ``content``, carrying the stored ``version`` (cached by version).

    Raises :class:`PolicyUnavailable` when the content does not validate in this release.
    """
    policy = _CACHE.get(version)
    if policy is None:
        try:
            policy = config_of(content).build()
        except ValueError as exc:
            raise PolicyUnavailable(
                f"policy {version} cannot be read by this release of the worker: {exc}"
            ) from exc
        policy = _CACHE[version] = dataclasses.replace(policy, version=version)
    return policy


def cached_policy(version: str) -> AnyPolicy | None:
    """The policy of ``version`` if this process has read it before, else ``None``."""
    return _CACHE.get(version)
