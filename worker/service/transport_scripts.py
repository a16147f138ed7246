"""The Lua scripts of :mod:`worker.service.transport`, each atomic on the Redis server.

Kept apart from the channel code that runs them; the module docstring of
:mod:`worker.service.transport` says why each exists. Keys and arguments are listed above each.
:class:`Scripts` registers them on a client with redis-py's ``register_script``: each runs as
``EVALSHA`` (its SHA-1, not its text, on the wire), and redis-py loads it when the server does not
know it (a new or restarted server, ``SCRIPT FLUSH``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

# KEYS: in-flight list, unacked_index, unacked. ARGV: raw message, delivery tag, now, unacked value.
CLAIM = """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return 1
"""

def _take_loop(first_list: int, unacked_index: int, unacked: int, room: str, now: str) -> str:
    """Lua: pop up to ``room`` messages from ``KEYS[first_list..]`` (most urgent list first, oldest
    first in each), record each in ``unacked_index`` and ``unacked`` as ``QoS.append`` does, and
    append it to the table ``out``; counts them in ``taken``. An item that is not a kombu envelope
    goes back where it was and ends the script (``return out``)."""
    return f"""
for k = {first_list}, #KEYS do
  while taken < {room} do
    local raw = redis.call('RPOP', KEYS[k])
    if not raw then break end
    local ok, payload = pcall(cjson.decode, raw)
    local props = ok and type(payload) == 'table' and payload['properties']
    local tag = type(props) == 'table' and props['delivery_tag']
    if type(tag) ~= 'string' then
      redis.call('RPUSH', KEYS[k], raw)  -- not a message this script understands: back where it was
      return out
    end
    local info = type(props['delivery_info']) == 'table' and props['delivery_info'] or {{}}
    redis.call('ZADD', KEYS[{unacked_index}], {now}, tag)
    redis.call('HSET', KEYS[{unacked}], tag, '[' .. raw .. ',' .. cjson.encode(info['exchange'] or '') .. ','
                                     .. cjson.encode(info['routing_key'] or '') .. ']')
    out[#out + 1] = raw
    taken = taken + 1
  end
end
"""


# KEYS: unacked_index, unacked, then the queue's lists most urgent first. ARGV: most messages to
# take, now. Returns the raw messages taken, most urgent list first, oldest first in each. Each is
# popped and recorded as unacknowledged (as QoS.append records it) in this one atomic script, so
# there is no window in which Redis holds it nowhere.
TAKE_MORE = ("local out = {}\nlocal taken = 0\n" + _take_loop(3, 1, 2, "tonumber(ARGV[1])", "ARGV[2]")
             + "return out\n")

# KEYS: the in-flight list, unacked_index, unacked, then the queue's lists most urgent first.
# ARGV: the raw message moved into the in-flight list, its delivery tag, now, its unacked value,
# most further messages to take. CLAIM of the moved message and TAKE_MORE in one atomic script,
# one round trip: returns {claimed (1: the moved message is now recorded as unacknowledged; 0: a
# recovery put it back meanwhile, it is not ours), drained (1: every list was found empty), the
# further raw messages taken...}.
CLAIM_AND_TAKE_MORE = """
local out = {0, 0}
if redis.call('LREM', KEYS[1], -1, ARGV[1]) ~= 0 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
  out[1] = 1
end
local taken = 0
""" + _take_loop(4, 2, 3, "tonumber(ARGV[5])", "ARGV[3]") + """
if taken < tonumber(ARGV[5]) then out[2] = 1 end
return out
"""

# KEYS: the in-flight list, then the queue's lists most urgent first. Moves the oldest message of
# the first non-empty list into the in-flight list and returns it (nil when every list is empty).
TAKE_FIRST = """
for k = 2, #KEYS do
  local raw = redis.call('LMOVE', KEYS[k], KEYS[1], 'RIGHT', 'LEFT')
  if raw then return raw end
end
return false
"""


@dataclass(frozen=True)
class Scripts:
    """The four scripts registered on ``client`` (``redis.Redis.register_script``).

    Call one as ``scripts.claim(keys=[...], args=[...])``: it runs on ``client`` (a pooled
    connection per call) with ``EVALSHA``, loading the script first when the server answers
    ``NOSCRIPT``; raises what the command raises (``redis.ConnectionError``, ...).
    """

    client: redis.Redis
    claim: Script
    claim_and_take_more: Script
    take_first: Script
    take_more: Script

    @classmethod
    def register(cls, client: redis.Redis) -> Scripts:
        """Register :data:`CLAIM`, :data:`CLAIM_AND_TAKE_MORE`, :data:`TAKE_FIRST` and
        :data:`TAKE_MORE` on ``client`` (no round trip: the SHA-1s are computed here)."""
        return cls(client, client.register_script(CLAIM), client.register_script(CLAIM_AND_TAKE_MORE),
                   client.register_script(TAKE_FIRST), client.register_script(TAKE_MORE))

    def load(self) -> None:
        """Put the four scripts in the server's script cache, in one round trip (``SCRIPT LOAD``
        each, pipelined): what a new or restarted server, or ``SCRIPT FLUSH``, left empty. Raises
        what the commands raise (``redis.ConnectionError``, ``redis.ResponseError``)."""
        with self.client.pipeline(transaction=False) as pipe:
            for script in (self.claim, self.claim_and_take_more, self.take_first, self.take_more):
                pipe.script_load(script.script)
            pipe.execute()
