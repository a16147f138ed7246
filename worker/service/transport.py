"""kombu's Redis transport with no window in which a taken message exists only in a worker's memory.

The window (kombu 5.7, ``kombu/transport/redis.py``): a consumer takes a message in two steps, a
``BRPOP`` on the queue (``Channel._brpop_start``/``_brpop_read``) and then ``QoS.append``, a
separate ``ZADD unacked_index`` + ``HSET unacked`` on another connection. A Redis that stops or
crashes between the two has already popped the message (and, with an append-only file, persisted
the pop) but never records it as unacknowledged; the worker then drops its reserved request when
the connection is lost, and nothing in Redis holds the message any more. While workers drain a
backlog they loop BRPOP -> HSET continuously, so a Redis restart hits the window often (one
message lost in about one run in three of the restart-redis fault scenario).

The fix takes a message in two steps that are each atomic on the server, with the message in Redis
at every instant:

1. ``BLMOVE <queue> <in-flight list> RIGHT LEFT`` (``LMOVE`` for ``basic_get``) moves it into an
   in-flight list owned by this process, one per source queue
   (``unacked_inflight<sep><owner><sep><queue>``);
2. a Lua script removes it from that list (``LREM``) and, only if it was still there, records it
   in ``unacked_index`` and ``unacked`` as ``QoS.append`` does. Whoever removes a message from an
   in-flight list owns it, so the script never records a message that a recovery (below) has
   already put back: a message is delivered at most once per pop, never lost.

Fewer round trips: after a ``BLMOVE`` (or ``TAKE_FIRST``) moved one message, one Lua script
(:data:`CLAIM_AND_TAKE_MORE`) does step 2 for it *and* pops up to the prefetch window's room more,
recording each in ``unacked_index`` and ``unacked`` in the same atomic step. A backlog costs two
round trips per up to 101 messages; a shallow queue two per message, not four: when that script
finds every list empty, the next poll blocks (``BLMOVE``) at once. A message that is not a kombu
envelope, or a no-ack consumer, takes the two separate steps (``CLAIM`` in ``QoS.append``, then
:data:`TAKE_MORE`).

A short linger at a shallow queue (transport option ``poll_linger``, seconds; the worker sets it
from ``RATINGS_POLL_LINGER``): when a poll took messages and left every list empty, the next poll
starts ``poll_linger`` seconds later, on a timer of the worker's event loop, and first looks at
every list (``TAKE_FIRST``, then ``CLAIM_AND_TAKE_MORE``). What arrived meanwhile is then taken in
two round trips and reaches the batcher together, as one batch: at moderate load a node's polls,
batches and transactions carry several messages instead of one each. A message waits at most
``poll_linger`` longer; an idle queue is still waited on with ``BLMOVE`` (a poll that found nothing
does not linger), and a deep queue never lingers (its polls do not empty it). Without an event loop
(``drain_events`` consumers) there is no linger.

Recovery pushes in-flight messages back onto their queue (``LMOVE ... LEFT RIGHT``: they are taken
next, in order): this process's own lists when a channel starts consuming (after a reconnection),
on every unacked-restore tick, and at channel close; other processes' lists (a worker killed
between the two steps) once their owner has not refreshed its entry in the ``unacked_inflight``
sorted set for ``visibility_timeout`` seconds, as kombu does for the ``unacked`` hash.

Everything else is kombu's: acknowledgement, reject/requeue, and the visibility-timeout restore
from the ``unacked`` hash. Limits: the server must be Redis >= 6.2 (``BLMOVE``); a channel
consuming from several queues at once falls back to kombu's ``BRPOP`` (which ``BLMOVE``,
single-key, cannot replace) and logs that the window is open.

Every list a producer can fill for a queue is consumed (:func:`queue_keys`: the priority lists
too, see :mod:`worker.service.redis_queue`): each poll first takes, in one atomic script
(:data:`TAKE_FIRST`), the oldest message of the most urgent non-empty list into the in-flight list;
only when every list is empty does it block (``BLMOVE``, at most ``brpop_timeout`` seconds, 1 s by
default) on the plain list. An item that is not a kombu message envelope (:func:`envelope`) is
delivered wrapped in one, so the consumer turns it into a dead letter with its exact bytes.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from contextlib import contextmanager
from queue import Empty
from time import monotonic, time

import redis
from kombu.asynchronous import get_event_loop
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

from worker.service.redis_queue import as_envelope, envelope, queue_keys
from worker.service.transport_scripts import Scripts

log = logging.getLogger(__name__)

INFLIGHT = "unacked_inflight"
"""Sorted set of in-flight lists (member: the list's key, score: the owner's last refresh)."""

RECORDED = object()
"""Marks ``Channel._pending`` for a message :data:`TAKE_MORE` already recorded as unacknowledged."""

TAKE_MORE_MAX = 100
"""Most messages taken in one :data:`TAKE_MORE` round trip (the prefetch window bounds it too)."""

_owner: tuple[int, str] | None = None


def owner() -> str:
    """This process's name for its in-flight lists (renewed in a forked child)."""
    global _owner
    if _owner is None or _owner[0] != os.getpid():
        _owner = (os.getpid(), f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    return _owner[1]


def _cmd(client, *args):
    """Run a command with keys the caller has prefixed (bypasses kombu's global-key-prefix mixin)."""
    return redis.Redis.execute_command(client, *args)


class QoS(kombu_redis.QoS):
    """kombu's QoS, recording a message taken through an in-flight list atomically."""

    def append(self, message, delivery_tag):
        pending = self.channel._pending
        if pending is None or pending[2] != delivery_tag:
            return super().append(message, delivery_tag)
        inflight, raw, _ = pending
        self.channel._pending = None
        if inflight is RECORDED:  # taken and recorded by TAKE_MORE in one atomic step
            super(kombu_redis.QoS, self).append(message, delivery_tag)
            return
        delivery = message.delivery_info
        value = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        k = self.channel._k
        claimed = self.channel._scripts().claim(
            keys=[k(inflight), k(self.unacked_index_key), k(self.unacked_key)],
            args=[raw, delivery_tag, time(), value])
        if not claimed:  # put back by a recovery meanwhile: it is on the queue again, not ours
            raise Empty()
        super(kombu_redis.QoS, self).append(message, delivery_tag)  # virtual.QoS bookkeeping

    def ack_many(self, delivery_tags) -> None:
        """Acknowledge several messages in one round trip (one ``ZREM`` and one ``HDEL`` for all):
        what :meth:`ack` does for one, for a batch applied in one transaction."""
        tags = list(delivery_tags)
        if not tags:
            return
        with self.pipe_or_acquire() as pipe:
            pipe.zrem(self.unacked_index_key, *tags).hdel(self.unacked_key, *tags).execute()
        for tag in tags:
            super(kombu_redis.QoS, self).ack(tag)  # virtual.QoS bookkeeping, as kombu's ack

    def restore_unacked(self, client=None):
        """kombu's restore at channel close, which must not kill the worker.

        After a lost broker connection Celery closes the channel, and kombu's restore then builds
        a client from a connection object that is already gone (``AttributeError: 'NoneType'
        object has no attribute 'hostname'``), or cannot reach Redis at all; that error escapes
        Celery's ``ignore_errors`` and stops the worker ("Unrecoverable error"). Skipping the
        restore loses nothing: the messages stay in the ``unacked`` hash and the
        visibility-timeout sweep puts them back on the queue.
        """
        try:
            return super().restore_unacked(client)
        except (AttributeError, *self.channel.connection_errors) as exc:
            log.warning("unacknowledged messages not restored at close (%s: %s); the "
                        "visibility-timeout sweep returns them", type(exc).__name__, exc)
            return None

    _silent_since: float | None = None  # monotonic time the sweep first found the broker silent

    def restore_visible(self, start=0, num=10, interval=10):
        try:
            self.channel.recover_inflight()
            super().restore_visible(start, num, interval)
            if (self._vrestore_count - 1) % (interval or 1) == 0:
                self.channel.recover_orphans(time() - self.visibility_timeout)
        except self.channel.connection_errors as exc:
            # kombu skips the sweep silently (debug); a broker that stopped answering (frozen,
            # partitioned) must show in the log, once per outage
            if self._silent_since is None:
                self._silent_since = monotonic()
                log.warning("broker not answering (%s: %s): sweeps and acknowledgements wait for it; "
                            "unacknowledged messages stay in Redis", type(exc).__name__, exc)
            raise
        if self._silent_since is not None:
            log.warning("broker answers again after %.1f s", monotonic() - self._silent_since)
            self._silent_since = None


class Channel(kombu_redis.Channel):
    """kombu's Redis channel taking messages with ``BLMOVE`` into an in-flight list (see module doc)."""

    QoS = QoS
    priority_steps = [0]
    _pending = None  # (in-flight list, raw message, delivery tag) between the move and the claim
    _blmove = False  # one queue consumed: TAKE_FIRST/BLMOVE (else kombu's multi-key BRPOP)
    _poll_cmd = None  # the command in flight on the polling connection, or the last one sent
    _key_queue: dict = {}
    _warned_multi = False
    poll_linger = 0.0
    """Seconds the next poll waits after a poll that took messages and emptied the queue (module doc)."""
    _poll_not_before = 0.0  # monotonic time before which no poll starts (a linger)
    _shared_client = None  # the client conn_or_acquire hands out (on the channel's connection pool)
    _lua: Scripts | None = None  # the Lua scripts, on a client of the channel's connection pool

    # kombu types the option tuple by its exact length; one name more is still a tuple of names
    from_transport_options = kombu_redis.Channel.from_transport_options + ("poll_linger",)  # type: ignore[assignment]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self.connection, "inflight_lists"):
            self.connection.inflight_lists = {}  # in-flight list -> source queue key, per transport

    @contextmanager
    def conn_or_acquire(self, client=None):
        """kombu's, except that it hands out one client of the channel's connection pool, kept,
        instead of building a ``redis.Redis`` per call: each command still takes a pooled connection
        of its own (thread-safe as kombu's), but the client's construction (its table of response
        callbacks) was about a sixth of the worker main process's CPU at a shallow queue (a claim
        and an acknowledgement per message)."""
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()
        yield shared

    def _k(self, key: str) -> str:
        return self.global_keyprefix + key

    def _scripts(self) -> Scripts:
        """The Lua scripts, registered on a plain ``redis.Redis`` client of the channel's connection
        pool (kept, like :meth:`conn_or_acquire`'s client). Plain, because the scripts' keys are
        already prefixed (:meth:`_k`) and kombu's prefixing client would prefix an ``EVALSHA``'s
        first key a second time; the pool's credential provider is passed as kombu passes it."""
        registered = self._lua
        if registered is None or registered.client.connection_pool is not self.pool:
            kwargs: dict = {"connection_pool": self.pool}
            provider = self.pool.connection_kwargs.get("credential_provider")
            if provider is not None:
                kwargs["credential_provider"] = provider
            registered = self._lua = Scripts.register(redis.Redis(**kwargs))
        return registered

    def _inflight(self, source: str) -> str:
        """This process's in-flight list for queue ``source`` (one for all of its lists: a message
        recovered from it goes back to the plain list)."""
        key = f"{INFLIGHT}{self.sep}{owner()}{self.sep}{source}"
        if key not in self.connection.inflight_lists:
            self.connection.inflight_lists[key] = source
            self.recover_inflight([key])
        return key

    def recover_inflight(self, keys=None) -> int:
        """Refresh this process's in-flight lists and push what they hold back onto its queues."""
        lists = self.connection.inflight_lists
        keys = list(lists) if keys is None else keys
        moved = 0
        with self.conn_or_acquire() as client:
            for key in keys:
                _cmd(client, "ZADD", self._k(INFLIGHT), time(), key)
                while _cmd(client, "LMOVE", self._k(key), self._k(lists[key]), "LEFT", "RIGHT") is not None:
                    moved += 1
        if moved:
            log.warning("pushed %d in-flight message(s) back onto their queue", moved)
        return moved

    def recover_orphans(self, ceil: float) -> int:
        """Push back what the in-flight lists of owners silent since ``ceil`` hold; forget them."""
        moved = 0
        with self.conn_or_acquire() as client:
            for key in _cmd(client, "ZRANGEBYSCORE", self._k(INFLIGHT), "-inf", ceil):
                key = bytes_to_str(key)
                source = key.split(self.sep, 2)[2]
                while _cmd(client, "LMOVE", self._k(key), self._k(source), "LEFT", "RIGHT") is not None:
                    moved += 1
                _cmd(client, "ZREM", self._k(INFLIGHT), key)
        if moved:
            log.warning("pushed %d message(s) of dead consumers' in-flight lists back onto their queue", moved)
        return moved

    def _keys(self, queue: str) -> list[str]:
        """The lists of ``queue``, most urgent first (see :func:`queue_keys`)."""
        return queue_keys(queue)

    def _brpop_start(self, timeout=None):
        queues = self._queue_cycle.consume(len(self.active_queues))
        self._blmove = len(queues) == 1
        if not self._blmove:
            if queues and not self._warned_multi:
                self._warned_multi = True
                log.warning("consuming %d queues: BRPOP, a Redis stop between pop and ack "
                            "bookkeeping can lose a message", len(queues))
            if not queues:
                return None
            timeout = self.brpop_timeout if timeout is None else timeout
            self._key_queue = {k: q for q in queues for k in self._keys(q)}
            lists = [self._keys(q) for q in queues]  # most urgent first, queue after queue
            keys = [self._k(keys[i]) for i in range(len(lists[0])) for keys in lists]
            self._poll_cmd = "BRPOP"
            self._in_poll = self.client.connection
            self._brpop_sent_at = monotonic()  # type: ignore[assignment]  # kombu's `= None` types it None
            self.client.connection.send_command("BRPOP", *keys, timeout or 0)
            return None
        if self._poll_not_before and monotonic() < self._poll_not_before:
            return None  # lingering: the event loop's timer ticks at its end and the poll starts then
        self._poll_not_before = 0.0
        queue = queues[0]
        inflight = self._inflight(queue)
        self._poll_keys = (queue, inflight)
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()  # type: ignore[assignment]  # kombu's `= None` types it None
        if self._poll_cmd != "EVALSHA":  # first look at every list of the queue, most urgent first
            self._poll_cmd = "EVALSHA"
            keys = [self._k(inflight)] + [self._k(k) for k in self._keys(queue)]
            self.client.connection.send_command("EVALSHA", self._scripts().take_first.sha, len(keys), *keys)
        else:  # every list was empty: wait on the plain one, at most brpop_timeout seconds
            self._poll_cmd = "BLMOVE"
            timeout = self.brpop_timeout if timeout is None else timeout
            self.client.connection.send_command(
                "BLMOVE", self._k(queue), self._k(inflight), "RIGHT", "LEFT", timeout or 0)

    def _brpop_read(self, **options):
        command = self._poll_cmd
        try:
            try:
                reply = self.client.parse_response(self.client.connection, command, **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                self._poll_cmd = None
                raise
            except redis.exceptions.NoScriptError:
                # TAKE_FIRST sent by its SHA-1 to a server whose script cache is empty (restarted,
                # SCRIPT FLUSH): nothing was taken; load the scripts, and the next poll looks again
                self._scripts().load()
                self._poll_cmd = None
                raise Empty() from None
            if command == "BRPOP":  # several queues: kombu's way, every list of each
                if not reply:
                    raise Empty()
                dest, item = reply
                queue = self._key_queue[bytes_to_str(dest)[len(self.global_keyprefix):]]
                self._queue_cycle.rotate(queue)
                self.connection._deliver(envelope(item, queue), queue)
                return True
            if not reply:
                if command == "BLMOVE":
                    self._poll_cmd = None  # next poll looks at every list again
                raise Empty()
            self._poll_cmd = None
            queue, inflight = self._poll_keys
            self._queue_cycle.rotate(queue)
            if not self._claim_and_take_more(inflight, reply, queue):
                self._deliver_moved(inflight, reply, queue)
                self._take_more(queue)
            return True
        finally:
            self._in_poll = False  # not polling: kombu's own value (its class attribute and its reset)
            self._flush_brpop_reauth()

    def _deliver_moved(self, inflight: str, item: bytes, queue: str) -> None:
        payload = envelope(item, queue)
        self._pending = (inflight, item, payload["properties"]["delivery_tag"])
        self.connection._deliver(payload, queue)
        self._release_pending()

    def _room(self, delivered: int = 0) -> int:
        """Messages the prefetch window still has room for, beyond ``delivered`` about to be
        delivered, at most :data:`TAKE_MORE_MAX`."""
        room = self.qos.can_consume_max_estimate()
        return TAKE_MORE_MAX if room is None else max(0, min(room - delivered, TAKE_MORE_MAX))

    def _claim_and_take_more(self, inflight: str, item: bytes, queue: str) -> bool:
        """The message ``item`` just moved into ``inflight``: record it as unacknowledged and take
        what else waits in ``queue``'s lists (up to the prefetch window and :data:`TAKE_MORE_MAX`),
        in one atomic script and one round trip (:data:`CLAIM_AND_TAKE_MORE`), then deliver them
        (the moved message first, unless a recovery put it back meanwhile).

        What :meth:`_deliver_moved` (its claim in ``QoS.append``) then :meth:`_take_more` do in
        two round trips. At a shallow queue, where most polls deliver one message, this halves the
        worker main process's round trips per message; and when every list was found empty, the
        next poll blocks (``BLMOVE``) at once instead of first looking again (``TAKE_FIRST``).
        Returns False, having done nothing, when that path does not apply (a no-ack consumer, an
        item that is not a kombu envelope: the caller delivers it the two-step way).
        """
        if self.no_ack_consumers or queue not in self.connection._callbacks:
            return False
        payload = as_envelope(item)
        if payload is None:
            return False
        tag = payload["properties"]["delivery_tag"]
        info = payload["properties"].get("delivery_info")
        info = info if isinstance(info, dict) else {}
        value = b"".join((b"[", item, b",", dumps(info.get("exchange") or "").encode(), b",",
                          dumps(info.get("routing_key") or "").encode(), b"]"))
        room = self._room(delivered=1)
        keys = [self._k(inflight), self._k(self.qos.unacked_index_key), self._k(self.qos.unacked_key)]
        keys += [self._k(k) for k in self._keys(queue)]
        reply = self._scripts().claim_and_take_more(keys=keys, args=[item, tag, time(), value, room])
        claimed, drained, raws = reply[0], reply[1], reply[2:]
        if drained:  # every list was empty just now: linger, then look; else wait (BLMOVE)
            self._poll_cmd = None if (claimed or raws) and self._linger() else "EVALSHA"
        if claimed:
            self._deliver_recorded(payload, item, queue)
        for raw in raws:
            self._deliver_recorded(loads(bytes_to_str(raw)), raw, queue)
        return True

    def _linger(self) -> bool:
        """Start a linger of :attr:`poll_linger` seconds before the next poll (module doc): a timer
        on the worker's event loop makes it tick at the linger's end. False, doing nothing, when
        the linger is 0 or there is no event loop."""
        if self.poll_linger <= 0:
            return False
        hub = get_event_loop()
        if hub is None:
            return False
        self._poll_not_before = monotonic() + self.poll_linger
        hub.call_later(self.poll_linger, _tick)
        return True

    def _deliver_recorded(self, payload: dict, raw: bytes, queue: str) -> None:
        """Deliver a message already recorded as unacknowledged (``QoS.append`` only does its
        bookkeeping)."""
        self._pending = (RECORDED, raw, payload["properties"]["delivery_tag"])  # type: ignore[assignment]
        try:
            self.connection._deliver(payload, queue)
        finally:
            self._pending = None

    def _take_more(self, queue: str) -> int:
        """After a message was delivered, take what else waits in ``queue``'s lists (most urgent
        list first; up to the prefetch window and :data:`TAKE_MORE_MAX`) in one round trip, each
        message popped and recorded as unacknowledged atomically (:data:`TAKE_MORE`), and deliver
        them in that order.

        A backlog then costs one round trip per many messages instead of two per message. Skipped
        for no-ack consumers (nothing would acknowledge what the script records). Returns how many
        were delivered.
        """
        if self.no_ack_consumers or queue not in self.connection._callbacks:
            return 0
        room = self._room()
        if room <= 0:
            return 0
        keys = [self._k(self.qos.unacked_index_key), self._k(self.qos.unacked_key)]
        keys += [self._k(k) for k in self._keys(queue)]
        raws = self._scripts().take_more(keys=keys, args=[room, time()])
        for raw in raws or ():
            self._deliver_recorded(loads(bytes_to_str(raw)), raw, queue)
        return len(raws or ())

    def _release_pending(self) -> None:
        """A message taken but not recorded as unacknowledged (no-ack consumer): drop it from the list."""
        if self._pending is not None and self._pending[0] is not RECORDED:
            inflight, raw, _ = self._pending
            self._pending = None
            with self.conn_or_acquire() as client:
                _cmd(client, "LREM", self._k(inflight), -1, raw)

    def _poll_error(self, type, **options):
        if type == "BRPOP" and self._blmove:
            return self.client.parse_response(self.client.connection, self._poll_cmd or "BLMOVE")
        return super()._poll_error(type, **options)

    def _get(self, queue):  # type: ignore[override]  # as kombu's redis Channel._get: no timeout
        inflight = self._inflight(queue)
        keys = [self._k(inflight)] + [self._k(k) for k in self._keys(queue)]
        item = self._scripts().take_first(keys=keys)
        with self.conn_or_acquire() as client:
            self._maybe_update_queues_expire(client, queue)
        if not item:
            raise Empty()
        payload = envelope(item, queue)
        self._pending = (inflight, item, payload["properties"]["delivery_tag"])
        return payload

    def _size(self, queue):
        """Messages waiting in every list of ``queue`` (kombu counts its ``priority_steps`` only)."""
        with self.conn_or_acquire() as client:
            with client.pipeline() as pipe:
                for key in self._keys(queue):
                    pipe.llen(key)
                return sum(pipe.execute())

    def _purge(self, queue):
        with self.conn_or_acquire() as client:
            with client.pipeline() as pipe:
                for key in self._keys(queue):
                    pipe.llen(key).delete(key)
                return sum(pipe.execute()[::2])

    def _has_queue(self, queue, **kwargs):
        with self.conn_or_acquire() as client:
            with client.pipeline() as pipe:
                for key in self._keys(queue):
                    pipe.exists(key)
                return any(pipe.execute())

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        super()._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        with self.conn_or_acquire(client=kwargs.get("client")) as client:
            client.delete(*self._keys(queue))

    def basic_ack_many(self, delivery_tags) -> None:
        """Acknowledge the messages of ``delivery_tags`` in one round trip (see :meth:`QoS.ack_many`)."""
        self.qos.ack_many(delivery_tags)

    def basic_get(self, queue, no_ack=False, **kwargs):
        try:
            return super().basic_get(queue, no_ack=no_ack, **kwargs)
        finally:
            self._release_pending()

    def basic_consume(self, queue, *args, **kwargs):
        ret = super().basic_consume(queue, *args, **kwargs)
        if queue not in self.active_fanout_queues:
            self._scripts().load()  # before the first poll, which sends TAKE_FIRST by its SHA-1
            self._inflight(queue)
            self.recover_inflight()
        return ret

    def close(self):
        if not self.closed and self.connection is not None and self.connection.inflight_lists:
            try:  # before kombu reads a pending BLMOVE reply: its claim then fails, nothing doubles
                self.recover_inflight()
            except Exception:  # the server may be gone: the next consumer or the sweep recovers
                log.debug("in-flight recovery at close failed", exc_info=True)
        super().close()


def _tick() -> None:
    """A timer callback that does nothing: its firing runs the event loop's tick, which starts the
    poll a linger held back."""


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel` (select it with ``broker_transport``)."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """:class:`Channel` on a primary found through Redis Sentinel (kombu's ``SentinelChannel``
    gives the connection pool, this module everything else).

    The pop guarantees are the same as on one server. What a failover adds is Redis replication's:
    a promoted replica misses the primary's last writes (a push, a move into an in-flight list, an
    ``unacked`` record, an ack). A lost push is a lost message (the producer's ``wait_replicas``
    narrows that window); a lost move, record or ack is a redelivery, a counted duplicate.
    """

    # kombu types the option tuple by its exact length; one name more is still a tuple of names
    from_transport_options = kombu_redis.SentinelChannel.from_transport_options + ("poll_linger",)  # type: ignore[assignment]


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport with :class:`SentinelChannel` (``sentinel://`` broker URLs)."""

    Channel = SentinelChannel
