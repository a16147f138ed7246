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

A backlog is taken faster: after a ``BLMOVE`` delivered one message, one Lua script
(:data:`TAKE_MORE`) pops up to the prefetch window's room more and records each in ``unacked_index``
and ``unacked`` in the same atomic step (no in-flight list needed: nothing happens between the pop
and the record), one round trip for many messages instead of two per message.

Recovery pushes in-flight messages back onto their queue (``LMOVE ... LEFT RIGHT``: they are taken
next, in order): this process's own lists when a channel starts consuming (after a reconnection),
on every unacked-restore tick, and at channel close; other processes' lists (a worker killed
between the two steps) once their owner has not refreshed its entry in the ``unacked_inflight``
sorted set for ``visibility_timeout`` seconds, as kombu does for the ``unacked`` hash.

Everything else is kombu's: acknowledgement, reject/requeue, and the visibility-timeout restore
from the ``unacked`` hash. Limits: the server must be Redis >= 6.2 (``BLMOVE``); priorities are
not used (``priority_steps`` is ``[0]``: a message of any priority published by this transport goes
to the plain queue list); a channel consuming from several queues at once falls back to kombu's
``BRPOP`` (which ``BLMOVE``, single-key, cannot replace) and logs that the window is open.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from time import monotonic, time

import redis
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads
from queue import Empty

log = logging.getLogger(__name__)

INFLIGHT = "unacked_inflight"
"""Sorted set of in-flight lists (member: the list's key, score: the owner's last refresh)."""

# KEYS: in-flight list, unacked_index, unacked. ARGV: raw message, delivery tag, now, unacked value.
CLAIM = """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return 1
"""

# KEYS: queue, unacked_index, unacked. ARGV: most messages to take, now. Returns the raw messages
# taken, oldest first. Each is popped and recorded as unacknowledged (as QoS.append records it) in
# this one atomic script, so there is no window in which Redis holds it nowhere.
TAKE_MORE = """
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local raw = redis.call('RPOP', KEYS[1])
  if not raw then break end
  local ok, payload = pcall(cjson.decode, raw)
  local props = ok and type(payload) == 'table' and payload['properties']
  local tag = type(props) == 'table' and props['delivery_tag']
  if type(tag) ~= 'string' then
    redis.call('RPUSH', KEYS[1], raw)  -- not a message this script understands: back where it was
    break
  end
  local info = type(props['delivery_info']) == 'table' and props['delivery_info'] or {}
  redis.call('ZADD', KEYS[2], ARGV[2], tag)
  redis.call('HSET', KEYS[3], tag, '[' .. raw .. ',' .. cjson.encode(info['exchange'] or '') .. ','
                                   .. cjson.encode(info['routing_key'] or '') .. ']')
  out[#out + 1] = raw
end
return out
"""

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
        with self.channel.conn_or_acquire() as client:
            claimed = _cmd(client, "EVAL", CLAIM, 3, k(inflight), k(self.unacked_index_key),
                           k(self.unacked_key), raw, delivery_tag, time(), value)
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

    def restore_visible(self, start=0, num=10, interval=10):
        self.channel.recover_inflight()
        super().restore_visible(start, num, interval)
        if (self._vrestore_count - 1) % (interval or 1) == 0:
            self.channel.recover_orphans(time() - self.visibility_timeout)


class Channel(kombu_redis.Channel):
    """kombu's Redis channel taking messages with ``BLMOVE`` into an in-flight list (see module doc)."""

    QoS = QoS
    priority_steps = [0]
    _pending = None  # (in-flight list, raw message, delivery tag) between the move and the claim
    _blmove = False  # the command in flight on the polling connection is BLMOVE (else BRPOP)
    _warned_multi = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self.connection, "inflight_lists"):
            self.connection.inflight_lists = {}  # in-flight list -> source queue key, per transport

    def _k(self, key: str) -> str:
        return self.global_keyprefix + key

    def _inflight(self, source: str) -> str:
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

    def _brpop_start(self, timeout=None):
        queues = self._queue_cycle.consume(len(self.active_queues))
        keys = [self._q_for_pri(q, pri) for pri in self.priority_steps for q in queues]
        self._blmove = len(keys) == 1
        if not self._blmove:
            if keys and not self._warned_multi:
                self._warned_multi = True
                log.warning("consuming %d queue keys: BRPOP, a Redis stop between pop and ack "
                            "bookkeeping can lose a message", len(keys))
            return super()._brpop_start(timeout)
        timeout = self.brpop_timeout if timeout is None else timeout
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()
        self._poll_keys = (keys[0], self._inflight(keys[0]))
        self.client.connection.send_command(
            "BLMOVE", self._k(keys[0]), self._k(self._poll_keys[1]), "RIGHT", "LEFT", timeout or 0)

    def _brpop_read(self, **options):
        if not self._blmove:
            return super()._brpop_read(**options)
        try:
            try:
                item = self.client.parse_response(self.client.connection, "BLMOVE", **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            if not item:
                raise Empty()
            source, inflight = self._poll_keys
            self._queue_cycle.rotate(source)
            self._deliver_moved(inflight, item, source)
            self._take_more(source)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()

    def _deliver_moved(self, inflight: str, item: bytes, queue: str) -> None:
        payload = loads(bytes_to_str(item))
        self._pending = (inflight, item, payload["properties"]["delivery_tag"])
        self.connection._deliver(payload, queue)
        self._release_pending()

    def _take_more(self, queue: str) -> int:
        """After a ``BLMOVE`` delivered one message, take what else waits on ``queue`` (up to the
        prefetch window and :data:`TAKE_MORE_MAX`) in one round trip, each message popped and
        recorded as unacknowledged atomically (:data:`TAKE_MORE`), and deliver them in order.

        A backlog then costs one round trip per many messages instead of two per message. Skipped
        for no-ack consumers (nothing would acknowledge what the script records). Returns how many
        were delivered.
        """
        if self.no_ack_consumers or queue not in self.connection._callbacks:
            return 0
        room = self.qos.can_consume_max_estimate()
        room = TAKE_MORE_MAX if room is None else min(room, TAKE_MORE_MAX)
        if room <= 0:
            return 0
        with self.conn_or_acquire() as client:
            raws = _cmd(client, "EVAL", TAKE_MORE, 3, self._k(queue), self._k(self.qos.unacked_index_key),
                        self._k(self.qos.unacked_key), room, time())
        for raw in raws or ():
            payload = loads(bytes_to_str(raw))
            self._pending = (RECORDED, raw, payload["properties"]["delivery_tag"])
            try:
                self.connection._deliver(payload, queue)
            finally:
                self._pending = None
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
            return self.client.parse_response(self.client.connection, "BLMOVE")
        return super()._poll_error(type, **options)

    def _get(self, queue):
        key = self._q_for_pri(queue, 0)
        inflight = self._inflight(key)
        with self.conn_or_acquire() as client:
            item = _cmd(client, "LMOVE", self._k(key), self._k(inflight), "RIGHT", "LEFT")
            self._maybe_update_queues_expire(client, queue)
        if not item:
            raise Empty()
        payload = loads(bytes_to_str(item))
        self._pending = (inflight, item, payload["properties"]["delivery_tag"])
        return payload

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
            self._inflight(self._q_for_pri(queue, 0))
            self.recover_inflight()
        return ret

    def close(self):
        if not self.closed and self.connection is not None and self.connection.inflight_lists:
            try:  # before kombu reads a pending BLMOVE reply: its claim then fails, nothing doubles
                self.recover_inflight()
            except Exception:  # the server may be gone: the next consumer or the sweep recovers
                log.debug("in-flight recovery at close failed", exc_info=True)
        super().close()


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel` (select it with ``broker_transport``)."""

    Channel = Channel
