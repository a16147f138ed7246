"""The Redis ACL rules of a least-privilege consumer: read the stream and manage its group's entries, nothing else."""

from __future__ import annotations


def consumer_acl_rules(stream: str, group: str) -> list[str]:
    """``ACL SETUSER <user> on ><password>`` rules (a list of rule words) for a member of consumer group
    ``group`` on ``stream`` using :class:`worker.consumer.RatingEventConsumer` with a
    :class:`worker.consumer.RedisState` under ``{stream}:{group}:state``.

    Root permissions: on the stream key only, the commands a group member runs (XREADGROUP, XACK,
    XAUTOCLAIM, XPENDING, XINFO GROUPS/STREAM, XRANGE, XREAD, XGROUP CREATE/CREATECONSUMER, MULTI/EXEC);
    no XADD, XDEL, XTRIM, DEL, XGROUP DESTROY/SETID on it. A selector (Redis >= 7.0) allows, on the keys
    ``{stream}:{group}:*`` only, the parked-events stream (XADD, XRANGE) and the state (a set, a hash,
    a Lua script). Redis cannot restrict a consumer to one group's name: a user allowed XREADGROUP on
    the stream may name another group; give each downstream service its own user and watch
    ``ratings doctor``'s consumer groups.
    """
    own = f"{stream}:{group}:*"
    stream_commands = ["+xreadgroup", "+xack", "+xautoclaim", "+xclaim", "+xpending", "+xinfo|groups",
                       "+xinfo|stream", "+xrange", "+xread", "+xgroup|create", "+xgroup|createconsumer",
                       "+multi", "+exec", "+discard", "+ping", "+client|setname", "+time"]
    own_commands = ["+xadd", "+xrange", "+xlen", "+sadd", "+sismember", "+smembers", "+hget", "+hset",
                    "+hgetall", "+del", "+evalsha", "+eval", "+script|load", "+multi", "+exec"]
    return ["resetkeys", "resetchannels", "-@all", f"~{stream}", *stream_commands,
            f"({' '.join([f'~{own}', *own_commands])})"]
