"""A consumer process for the consumer fault tests: one member of a group, with the test's idempotency store.

Run as ``python -m tests.faults.consumer_process CONFIG_JSON``. The handler applies each event's
effect (the player's latest rating, kept with its sequence) at most once through a consumer-side
idempotency store in Redis (``{prefix}:applied``, the event ids applied, written in the same MULTI
as the effect), counts every call (``{prefix}:calls``) and every sequence applied per player. With
``hang_at`` = n, the n-th call applies its effect and then hangs (the test kills the process there:
after the effect, before the acknowledgement). The cumulative :class:`PollReport` goes to
``{prefix}:report:{consumer}:{pid}`` after each poll.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time

import redis

from worker.consumer import CliBackfill, RatingEventConsumer, RedisState
from worker.consumer.database import DatabaseBackfill

_SET_RATING = """
local seq = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[3]) > seq then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
"""

_APPLY = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[2], ARGV[5])
local seq = tonumber(redis.call('HGET', KEYS[4], ARGV[2]) or '0')
if tonumber(ARGV[4]) > seq then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3]); redis.call('HSET', KEYS[4], ARGV[2], ARGV[4])
end
return 1
"""


def main(config: dict) -> None:
    client = redis.Redis.from_url(config["broker_url"], decode_responses=True)
    p = config["prefix"]
    apply = client.register_script(_APPLY)
    set_rating = client.register_script(_SET_RATING)
    calls = {"n": 0}
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))

    def handle(event: dict) -> None:
        calls["n"] += 1
        key = f"{event['ladder']}|{event['player_id']}"
        client.hincrby(f"{p}:calls", event["event_id"], 1)
        apply(keys=[f"{p}:applied", f"{p}:seq:{key}", f"{p}:rating", f"{p}:rating-seq"],
              args=[event["event_id"], key, repr(event["rating_after"]), event["sequence"], event["sequence"]])
        if calls["n"] == config.get("hang_at"):
            client.set(f"{p}:hanging:{config['consumer']}", os.getpid())
            time.sleep(3600)  # killed here: effect applied, entry not acknowledged
        if config.get("handler_delay"):
            time.sleep(config["handler_delay"])

    def on_snapshot(row: dict) -> None:
        key = f"{row['ladder']}|{row['player_id']}"
        set_rating(keys=[f"{p}:rating", f"{p}:rating-seq"], args=[key, repr(row["rating"]), row["sequence"]])
        client.hset(f"{p}:snapshot-seq", key, row["sequence"])

    if config.get("backfill") == "cli":
        backfill = CliBackfill([sys.executable, "-m", "worker"], env={"RATINGS_DATABASE_URL": config["database_url"]})
    else:
        backfill = DatabaseBackfill(config["database_url"])
    consumer = RatingEventConsumer(
        client, handle, on_snapshot=on_snapshot, stream=config["stream"], group=config["group"],
        consumer=config["consumer"], state=RedisState(client, f"{p}:state"), backfill=backfill,
        claim_idle_ms=config.get("claim_idle_ms", 30_000), max_deliveries=config.get("max_deliveries", 5),
    )
    report_key = f"{p}:report:{config['consumer']}:{os.getpid()}"
    while not stop["now"]:
        consumer.poll(count=config.get("count", 20), block_ms=200)
        client.set(report_key, json.dumps(dataclasses.asdict(consumer.report) | {"gaps": len(consumer.report.gaps)}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
