"""Consumer library for rating-changed events: consumer groups, takeover, trimming, poison parking, gaps, backfill.

Needs only ``redis`` (redis-py >= 5) for the streaming part; :mod:`worker.consumer.database` (optional)
backfills straight from PostgreSQL with a read-only role. Supported servers: Redis >= 6.2 (both
XAUTOCLAIM behaviours, before and after redis/redis#10227, are handled) and Valkey.
"""

from worker.consumer.backfill import Backfill, CliBackfill
from worker.consumer.lag import GroupLag, consumer_lag
from worker.consumer.state import ConsumerState, MemoryState, RedisState
from worker.consumer.stream import STREAM, PollReport, RatingEventConsumer

__all__ = [
    "STREAM", "Backfill", "CliBackfill", "ConsumerState", "GroupLag", "MemoryState", "PollReport",
    "RatingEventConsumer", "RedisState", "consumer_lag",
]
