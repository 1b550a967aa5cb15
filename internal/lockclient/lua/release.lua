-- Release a lease only while it is still ours (compare-token-then-DEL).
-- See docs/redis-contract.md.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns {1} deleted, {0} absent, {0, <holder value>} another token holds it.
local current = redis.call("GET", KEYS[1])
if current == ARGV[1] then
  redis.call("DEL", KEYS[1])
  return {1}
end
if not current then
  return {0}
end
return {0, current}
