"""Backfill from the source of truth: read rating-changed events (and current ratings) that the stream lost.

A :class:`Backfill` answers two questions, both as lists of dicts:

- ``events(ladder, player_id, after_sequence)``: the RatingChanged events the outbox still keeps
  (``RATINGS_OUTBOX_RETENTION_DAYS``), oldest first per player, with ``sequence > after_sequence``;
- ``snapshot(ladder, player_id)``: each player's current state, ``{"ladder", "player_id", "rating",
  "sequence", "games_played"}``, ``sequence`` being that of the player's last event, for when the
  events a consumer needs were pruned (it then takes the snapshot and continues from ``sequence``).

:class:`CliBackfill` runs ``ratings events read`` / ``ratings events snapshot`` (JSON Lines), so a
consumer needs neither psycopg nor database credentials beyond the CLI's own; the direct query
lives in :mod:`worker.consumer.database`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Backfill(Protocol):
    """A read path to the events and current ratings in the database."""

    def events(self, ladder: str | None = None, player_id: str | None = None,
               after_sequence: int = 0) -> list[dict[str, Any]]:
        """Events kept in the outbox, per player in sequence order (see the module docstring)."""

    def snapshot(self, ladder: str | None = None, player_id: str | None = None) -> list[dict[str, Any]]:
        """Current rating and last sequence of each player (see the module docstring)."""


class CliBackfill:
    """:class:`Backfill` through the ``ratings`` CLI's JSON Lines output.

    ``command`` is the CLI's argv prefix (default ``["ratings"]``); ``env`` extra environment (e.g.
    ``RATINGS_DATABASE_URL`` of a read-only role). Raises :class:`subprocess.CalledProcessError`
    when the command fails (the consumer then leaves the entry pending and tries again).
    """

    def __init__(self, command: Sequence[str] = ("ratings",), env: Mapping[str, str] | None = None,
                 timeout: float = 300.0):
        self.command, self.timeout = list(command), timeout
        self.env = {**os.environ, **(env or {})}
        self.calls = 0

    def _run(self, args: list[str]) -> list[dict[str, Any]]:
        self.calls += 1
        out = subprocess.run(self.command + args, env=self.env, capture_output=True, text=True,
                             timeout=self.timeout, check=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    @staticmethod
    def _filters(ladder: str | None, player_id: str | None) -> list[str]:
        return (["--ladder", ladder] if ladder else []) + (["--player", player_id] if player_id else [])

    def events(self, ladder: str | None = None, player_id: str | None = None,
               after_sequence: int = 0) -> list[dict[str, Any]]:
        return self._run(["events", "read", *self._filters(ladder, player_id),
                          "--after-sequence", str(after_sequence)])

    def snapshot(self, ladder: str | None = None, player_id: str | None = None) -> list[dict[str, Any]]:
        return self._run(["events", "snapshot", *self._filters(ladder, player_id)])
