"""A downstream consumer of rating-changed events: a Redis Stream consumer group.

Reads with ``XREADGROUP``, handles each event once (drops duplicates by ``event_id``, which the
outbox relay may deliver more than once), detects gaps with the per-player ``sequence``, and
acknowledges every entry with ``XACK``. Run it as a script::

    RATINGS_BROKER_URL=redis://localhost:6379/0 python examples/consumer.py

Only ``redis`` is needed: a downstream service depends neither on the worker nor on its database.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import redis

STREAM = "ratings.rating-changed"


class RatingEventConsumer:
    """One member ``consumer`` of consumer group ``group`` on ``stream``.

    ``seen`` is a Redis set of handled event ids (in production: your own database, written in the
    same transaction as the effect of ``handle``); ``last_sequence`` a hash of the last sequence
    handled per ``ladder:player``. ``handle(event)`` receives each event (a dict) once.
    """

    def __init__(self, client: redis.Redis, handle: Callable[[dict], None], stream: str = STREAM,
                 group: str = "leaderboard", consumer: str = "consumer-1"):
        self.client, self.handle, self.stream, self.group, self.consumer = client, handle, stream, group, consumer
        self.seen_key = f"{stream}:{group}:seen"
        self.sequence_key = f"{stream}:{group}:last-sequence"
        self.duplicates = 0
        self.gaps: list[tuple[str, int, int]] = []
        try:
            client.xgroup_create(stream, group, id="0", mkstream=True)
        except redis.ResponseError as exc:  # BUSYGROUP: the group exists already
            if "BUSYGROUP" not in str(exc):
                raise

    def poll(self, count: int = 500, block_ms: int = 1000) -> int:
        """Read, handle and acknowledge up to ``count`` entries; return how many were read.

        Entries this consumer read before but did not acknowledge (its handler raised, or the
        process died) come first, then new ones. An event is marked seen only after ``handle``
        returned, so a failed event is handled again on the next poll.
        """
        reply = self.client.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=count)
        if not reply or not reply[0][1]:
            reply = self.client.xreadgroup(self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms)
        n = 0
        for _, entries in reply or []:
            for entry_id, fields in entries:
                n += 1
                event_id = _text(fields[b"event_id"] if b"event_id" in fields else fields["event_id"])
                if self.client.sismember(self.seen_key, event_id):
                    self.duplicates += 1  # delivered before: drop it
                else:
                    event = json.loads(_text(fields[b"payload"] if b"payload" in fields else fields["payload"]))
                    key = f"{event['ladder']}:{event['player_id']}"
                    last = int(self.client.hget(self.sequence_key, key) or 0)
                    if event["sequence"] != last + 1:
                        self.gaps.append((key, last, event["sequence"]))
                    self.handle(event)  # raises: not acknowledged, read again on the next poll
                    self.client.sadd(self.seen_key, event_id)
                    self.client.hset(self.sequence_key, key, max(last, event["sequence"]))
                self.client.xack(self.stream, self.group, entry_id)
        return n


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":  # pragma: no cover
    client = redis.Redis.from_url(os.environ.get("RATINGS_BROKER_URL", "redis://localhost:6379/0"))
    consumer = RatingEventConsumer(client, lambda e: print(e["player_id"], e["rating_before"], "->", e["rating_after"]),
                                   stream=os.environ.get("RATINGS_STREAM", STREAM))
    while True:
        consumer.poll()
