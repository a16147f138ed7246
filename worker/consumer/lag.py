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


def _undelivered(client: redis.Redis, stream: str, last: str, count_limit: int = 100_000) -> int:
    """Entries of ``stream`` after id ``last`` (at most ``count_limit``)."""
    n, start = 0, f"({last}" if last != "0-0" else "-"
    while n < count_limit:
        page = client.xrange(stream, min=start, max="+", count=min(10_000, count_limit - n))
        if not page:
            break
        n += len(page)
        start = f"({_text(page[-1][0])}"
    return n


def consumer_lag(client: redis.Redis, stream: str) -> list[GroupLag]:
    """Lag of every consumer group of ``stream`` (empty when the stream or its groups do not exist).

    Uses XINFO GROUPS, XRANGE (counting entries after the group's last delivered id, at most
    ``count_limit``), XPENDING and TIME. Redis 7.0's own ``lag`` field is not used: after MAXLEN trims it
    stays above 0 when the group has read everything (seen on 7.0.15).
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
        undelivered = _undelivered(client, stream, last)
        pending = int(g.get("pending") or 0)
        oldest = 0.0
        if pending:
            summary = client.xpending(stream, name)
            oldest_id = _text(summary.get("min"))
            if oldest_id:
                oldest = max(0.0, (now_ms - int(oldest_id.split("-")[0])) / 1000)
        out.append(GroupLag(name, int(undelivered), pending, round(oldest, 3), int(g.get("consumers") or 0)))
    return out
