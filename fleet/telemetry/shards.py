"""Which aggregator process owns which shard of the telemetry streams: leases in Redis.

Every aggregator calls `balance()` once per tick. In one atomic script it (1) renews its
membership (a sorted set scored by expiry), (2) counts the live members and computes a fair
share, ceil(SHARDS / members), (3) renews the leases it holds, giving back any beyond its
share (so a newcomer gets work), and (4) takes free shards up to its share. A killed
aggregator stops renewing: its leases lapse after LEASE_TTL_MS and the others take its shards
on their next tick, so takeover completes within LEASE_TTL_MS + one tick (< 5 s).

Entries are not lost in a handover: a shard stream is read through the consumer group GROUP,
and entries stay pending until the rollup buckets they fall in are written (then XACK and
XTRIM). The taker XAUTOCLAIMs every pending entry of a shard it just got and replays it
(`Aggregator._claim`), which rebuilds the windows and the open rollup buckets of its nodes.
The remaining hole: an owner that stalls longer than LEASE_TTL_MS and then reads once more
before it notices the loss would hold entries the taker has already claimed past; at the
next bucket close they are in its pending list and are re-claimed on the next takeover.
"""

from __future__ import annotations

MEMBERS_KEY = "tandem:aggregator:members"
LEASE_PREFIX = "tandem:aggregator:shard:"
GROUP = "aggregators"
LEASE_TTL_MS = 3000

BALANCE = """
local me, now, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local prefix = ARGV[5]
redis.call('zadd', KEYS[1], now + ttl, me)
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local members = redis.call('zcard', KEYS[1])
local fair = math.ceil(n / members)
local owned, free = {}, {}
for i = 0, n - 1 do
  local holder = redis.call('get', prefix .. i)
  if holder == me then
    table.insert(owned, i)
  elseif not holder then
    table.insert(free, i)
  end
end
while #owned > fair do
  redis.call('del', prefix .. table.remove(owned))
end
for _, i in ipairs(owned) do
  redis.call('pexpire', prefix .. i, ttl)
end
for _, i in ipairs(free) do
  if #owned >= fair then
    break
  end
  redis.call('set', prefix .. i, me, 'PX', ttl)
  table.insert(owned, i)
end
return owned
"""

RELEASE = """
redis.call('zrem', KEYS[1], ARGV[1])
for i = 0, tonumber(ARGV[2]) - 1 do
  if redis.call('get', ARGV[3] .. i) == ARGV[1] then
    redis.call('del', ARGV[3] .. i)
  end
end
return 1
"""


async def balance(r, me: str, now_ms: int, shards: int) -> frozenset[int]:
    """Renew membership and leases, give back beyond the fair share, take free shards."""
    owned = await r.eval(BALANCE, 1, MEMBERS_KEY, me, now_ms, LEASE_TTL_MS, shards, LEASE_PREFIX)
    return frozenset(int(i) for i in owned)


async def release(r, me: str, shards: int) -> None:
    """A clean stop: leave at once, so the others take the shards on their next tick."""
    await r.eval(RELEASE, 1, MEMBERS_KEY, me, shards, LEASE_PREFIX)
