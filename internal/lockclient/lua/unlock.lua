-- Delete a key only while its value's holder is the one given: a manual unlock
-- by someone who saw the holder (status, events and describe show holders,
-- never tokens). Used for a stale lock and for an occurrence's done-marker.
-- See docs/redis-contract.md.
--
-- KEYS[1]  the key (a lock or a done-marker)
-- ARGV[1]  holder: the value's part before its last "#", or the whole value
--          when it has no "#" (a foreign holder)
-- ARGV[2]  "lock" when KEYS[1] is a lock key: a GuardedJob lease on it that
--          still has time to live is never deleted. Its run may be working, in
--          this cluster or any other sharing the store, and the key expires by
--          itself within that run's ttl. Only a lock value with no expiry or a
--          foreign value (no "<cluster>/<namespace>/<job>#<random>" form) is.
--
-- Returns {1} deleted, {0} absent, {0, <value>} the value's holder differs,
-- {2, <value>, <pttl ms>} a live GuardedJob lease, left alone.
local current = redis.call("GET", KEYS[1])
if not current then
  return {0}
end
local holder = string.match(current, "^(.*)#") or current
if holder ~= ARGV[1] then
  return {0, current}
end
if ARGV[2] == "lock" and string.match(current, "^[^/#]+/[^/#]+/[^/#]+#[^#]*$") then
  local pttl = redis.call("PTTL", KEYS[1])
  if pttl > 0 then
    return {2, current, pttl}
  end
end
redis.call("DEL", KEYS[1])
return {1}
