"""Consumer lag per group of a stream: entries not yet delivered, pending entries, oldest pending age."""

from __future__ import annotations

from dataclasses import dataclass

import redis


@dataclass(frozen=True)
class GroupLag:
    """Lag of consumer group ``group``: ``undelivered`` entries after its last delivered id (entries
    still in the stream), ``pending`` entries delivered but not acknowledged, and
    ``oldest_pending_seconds``, the age of the oldest pending entry (from its id's millisecond
    time to the server's clock; 0 when none)."""

    group: str
    undelivered: int
    pending: int
    oldest_pending_seconds: float
    consumers: int


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def consumer_lag(client: redis.Redis, stream: str) -> list[GroupLag]:
    """Lag of every consumer group of ``stream`` (empty when the stream or its groups do not exist).

    Uses XINFO GROUPS (its ``lag`` field on Redis >= 7.0 when it is known, else a count of the
    entries after the group's last delivered id, bounded by the stream's cap), XPENDING and TIME.
    """
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:  # no such key
        return []
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    out = []
    for g in groups:
        name = _text(g["name"])
        last = _text(g.get("last-delivered-id")) or "0-0"
        undelivered = g.get("lag")
        if undelivered is None:
            undelivered = len(client.xrange(stream, min=f"({last}" if last != "0-0" else "-", max="+"))
        pending = int(g.get("pending") or 0)
        oldest = 0.0
        if pending:
            summary = client.xpending(stream, name)
            oldest_id = _text(summary.get("min"))
            if oldest_id:
                oldest = max(0.0, (now_ms - int(oldest_id.split("-")[0])) / 1000)
        out.append(GroupLag(name, int(undelivered), pending, round(oldest, 3), int(g.get("consumers") or 0)))
    return out
