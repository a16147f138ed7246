"""Broker settings that decide whether a queued match can vanish: Redis's eviction policy and persistence."""

from __future__ import annotations

from dataclasses import dataclass

SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
"""``maxmemory-policy`` values that never evict the queue (a list without a TTL): ``noeviction``,
and the ``volatile-*`` ones, which only evict keys that have an expiry."""


class EvictingBroker(RuntimeError):
    """The Redis broker may evict the queue's key under memory pressure (``maxmemory-policy``
    ``allkeys-*``): queued matches would vanish without a trace."""


@dataclass(frozen=True, slots=True)
class BrokerDurability:
    """What Redis says of its eviction and persistence (``None``: ``CONFIG GET`` is not allowed,
    as on some managed services)."""

    maxmemory_policy: str | None
    maxmemory: int | None
    rdb_save: str | None
    appendonly: str | None

    @property
    def evicting(self) -> bool:
        """True when a full Redis may drop the queue: an ``allkeys-*`` policy with a memory limit
        (``maxmemory`` 0 means no limit, so nothing is evicted)."""
        return (self.maxmemory_policy is not None and self.maxmemory_policy not in SAFE_POLICIES
                and self.maxmemory != 0)

    @property
    def persistence_off(self) -> bool:
        """True when neither snapshots (``save``) nor the append-only file is on: a Redis restart
        empties the queue."""
        return self.rdb_save == "" and self.appendonly == "no"

    def problems(self) -> list[str]:
        """One sentence per setting that can lose queued matches (empty when none, or unknown)."""
        found = []
        if self.evicting:
            found.append(f"Redis maxmemory-policy is {self.maxmemory_policy} (maxmemory {self.maxmemory} bytes): "
                         "a full Redis evicts the queue's key and queued matches vanish; set it to noeviction")
        if self.persistence_off:
            found.append("Redis persistence is off (save \"\" and appendonly no): a Redis restart empties the queue; "
                         "turn on appendonly for a production broker")
        return found


def broker_durability(client) -> BrokerDurability:
    """Read the settings through ``client`` (a ``redis.Redis``); unknown fields when ``CONFIG`` is refused.

    Raises ``redis.ConnectionError`` when Redis cannot be reached.
    """
    import redis

    def get(name: str) -> str | None:
        try:
            value = client.config_get(name).get(name)
        except redis.ResponseError:  # CONFIG disabled or renamed (managed Redis)
            return None
        return value.decode() if isinstance(value, bytes) else value

    maxmemory = get("maxmemory")
    return BrokerDurability(get("maxmemory-policy"), int(maxmemory) if maxmemory is not None else None,
                            get("save"), get("appendonly"))


def refuse_evicting_broker(broker_url: str) -> None:
    """Raise :class:`EvictingBroker` when the Redis at ``broker_url`` may evict the queue (the
    producer's start-up check); a Redis that refuses ``CONFIG`` passes. Raises
    ``redis.ConnectionError`` when it cannot be reached."""
    from worker.redis_url import redis_client

    client = redis_client(broker_url, socket_connect_timeout=5, socket_timeout=5)
    try:
        state = broker_durability(client)
    finally:
        client.close()
    if state.evicting:
        raise EvictingBroker(state.problems()[0]
                             + " (publishing refused; see docs/operators/runbook.md, 'broker keeps the queue')")
