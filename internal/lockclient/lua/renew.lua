-- Extend a lease only while it is still ours. See docs/redis-contract.md.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  "1": if the key is absent (Redis restarted empty), take it again with the
--          same token. Used only for runs whose policy prefers availability (FailOpen).
--
-- Returns {1} renewed, {2} re-acquired after absence, {0} absent, {0, <holder value>}.
local current = redis.call("GET", KEYS[1])
if current == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return {1}
end
if not current then
  if ARGV[3] == "1" then
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
    return {2}
  end
  return {0}
end
return {0, current}
