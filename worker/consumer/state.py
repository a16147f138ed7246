"""Consumer-side state: which event ids were handled and the last sequence per (ladder, player).

At-least-once delivery means the same event may reach a consumer again (relay republish, a
redelivery after a crash, a takeover, a backfill overlapping the stream). The library drops an
event whose ``event_id`` it recorded or whose ``sequence`` is not above the last one recorded for
its (ladder, player). The handler's own effect must still be idempotent by ``event_id`` (record the
id in the same transaction as the effect): a crash between the handler's commit and
:meth:`ConsumerState.record` delivers the event once more.
"""

from __future__ import annotations

from typing import Any, Protocol

import redis


class ConsumerState(Protocol):
    """Where a consumer keeps what it handled (shared by the members of one group)."""

    def seen(self, event_id: str) -> bool:
        """True when the event with ``event_id`` was recorded as handled."""

    def last_sequence(self, ladder: str, player_id: str) -> int:
        """The highest sequence recorded for (``ladder``, ``player_id``); 0 when none."""

    def record(self, event: dict[str, Any]) -> None:
        """Record ``event`` (a RatingChanged dict) as handled: its id, and its sequence if higher."""

    def advance(self, ladder: str, player_id: str, sequence: int) -> None:
        """Raise the last sequence of (``ladder``, ``player_id``) to ``sequence`` (a snapshot was applied)."""

    def all_sequences(self) -> dict[tuple[str, str], int]:
        """Every (ladder, player_id) recorded, with its last sequence."""


class MemoryState:
    """:class:`ConsumerState` in this process's memory (tests, one-member groups that rebuild on start)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.sequences: dict[tuple[str, str], int] = {}

    def seen(self, event_id: str) -> bool:
        return event_id in self.ids

    def last_sequence(self, ladder: str, player_id: str) -> int:
        return self.sequences.get((ladder, player_id), 0)

    def record(self, event: dict[str, Any]) -> None:
        self.ids.add(str(event["event_id"]))
        self.advance(event["ladder"], event["player_id"], int(event["sequence"]))

    def advance(self, ladder: str, player_id: str, sequence: int) -> None:
        key = (ladder, player_id)
        self.sequences[key] = max(self.sequences.get(key, 0), sequence)

    def all_sequences(self) -> dict[tuple[str, str], int]:
        return dict(self.sequences)


_ADVANCE = """
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return current
"""


class RedisState:
    """:class:`ConsumerState` in Redis under ``prefix`` (a set ``{prefix}:seen`` of event ids and a
    hash ``{prefix}:sequence`` of ``ladder\\x1fplayer`` to last sequence), shared by a group's members.

    Keep it in the consumer's own Redis (or database) in production; the ids set grows by one
    member per event (expire or trim it beyond the outbox retention).
    """

    def __init__(self, client: redis.Redis, prefix: str):
        self.client = client
        self.seen_key, self.sequence_key = f"{prefix}:seen", f"{prefix}:sequence"
        self._advance = client.register_script(_ADVANCE)

    def seen(self, event_id: str) -> bool:
        return bool(self.client.sismember(self.seen_key, event_id))

    def last_sequence(self, ladder: str, player_id: str) -> int:
        return int(self.client.hget(self.sequence_key, f"{ladder}\x1f{player_id}") or 0)

    def record(self, event: dict[str, Any]) -> None:
        self.client.sadd(self.seen_key, str(event["event_id"]))
        self.advance(event["ladder"], event["player_id"], int(event["sequence"]))

    def advance(self, ladder: str, player_id: str, sequence: int) -> None:
        self._advance(keys=[self.sequence_key], args=[f"{ladder}\x1f{player_id}", sequence])

    def all_sequences(self) -> dict[tuple[str, str], int]:
        out = {}
        for k, v in self.client.hgetall(self.sequence_key).items():
            ladder, player = (k.decode() if isinstance(k, bytes) else k).split("\x1f", 1)
            out[(ladder, player)] = int(v)
        return out

    def clear(self) -> None:
        """Delete this state's keys."""
        self.client.delete(self.seen_key, self.sequence_key)
