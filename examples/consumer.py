"""A downstream consumer of rating-changed events, a thin use of :mod:`worker.consumer`.

One member of a Redis consumer group: takes over a dead member's entries, survives the stream's
trimming, parks poison events on ``<stream>:<group>:parked``, detects gaps per player and ladder and
backfills them from the database through ``ratings events`` (JSON Lines). Run it as a script::

    RATINGS_BROKER_URL=redis://localhost:6379/0 RATINGS_DATABASE_URL=postgresql://reader@db/ratings \\
        python examples/consumer.py leaderboard consumer-1

Only ``redis`` is needed to import it (the backfill runs the ``ratings`` CLI as a command).
"""

from __future__ import annotations

import os
import sys

import redis

from worker.consumer import CliBackfill, RatingEventConsumer, RedisState

STREAM = "ratings.rating-changed"


def leaderboard_consumer(client: redis.Redis, ratings: dict, *, stream: str = STREAM, group: str = "leaderboard",
                         consumer: str = "consumer-1", backfill=None) -> RatingEventConsumer:
    """A member of ``group`` that keeps ``ratings`` (mapping of (ladder, player_id) to rating points) current."""

    def handle(event: dict) -> None:  # your effect; make it idempotent by event["event_id"]
        ratings[(event["ladder"], event["player_id"])] = event["rating_after"]

    def on_snapshot(row: dict) -> None:  # events older than the outbox retention: take the current rating
        ratings[(row["ladder"], row["player_id"])] = row["rating"]

    return RatingEventConsumer(client, handle, on_snapshot=on_snapshot, stream=stream, group=group,
                               consumer=consumer, state=RedisState(client, f"{stream}:{group}:state"),
                               backfill=backfill)


def main(group: str = "leaderboard", consumer: str = "consumer-1") -> None:  # pragma: no cover
    client = redis.Redis.from_url(os.environ.get("RATINGS_BROKER_URL", "redis://localhost:6379/0"))
    ratings: dict = {}
    member = leaderboard_consumer(client, ratings, stream=os.environ.get("RATINGS_STREAM", STREAM), group=group,
                                  consumer=consumer, backfill=CliBackfill())
    while True:
        if member.poll():
            print(f"{len(ratings)} players; {member.report}")


if __name__ == "__main__":  # pragma: no cover
    main(*sys.argv[1:3])
