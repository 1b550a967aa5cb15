-- Delete a key only while its value's holder is the one given: a manual unlock
-- by someone who saw the holder (status, events and describe show holders,
-- never tokens). Used for a stale lock and for an occurrence's done-marker.
-- See docs/redis-contract.md.
--
-- KEYS[1]  the key (a lock or a done-marker)
-- ARGV[1]  holder: the value's part before its last "#", or the whole value
--          when it has no "#" (a foreign holder)
--
-- Returns {1} deleted, {0} absent, {0, <value>} the value's holder differs.
local current = redis.call("GET", KEYS[1])
if not current then
  return {0}
end
local holder = string.match(current, "^(.*)#") or current
if holder == ARGV[1] then
  redis.call("DEL", KEYS[1])
  return {1}
end
return {0, current}
