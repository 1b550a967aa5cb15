-- Mark an occurrence done and release the lease, in one atomic call.
-- See docs/redis-contract.md.
--
-- KEYS[1]  lock key
-- KEYS[2]  occurrence done-marker key
-- ARGV[1]  token
-- ARGV[2]  done-marker TTL in milliseconds
-- ARGV[3]  "keep": write the marker but keep the lock (the caller deletes it once
--          replicas acknowledged the marker); absent or anything else: delete it
--
-- The marker is written when the lock holds our token, or when it is absent (our
-- lease expired after the work finished): never while another token holds the lock.
-- Returns {1, 1} marked and released, {1, 0} marked (lock was absent),
-- {1, 2} marked and the lock kept, {0, <holder value>} nothing written.
local current = redis.call("GET", KEYS[1])
if current and current ~= ARGV[1] then
  return {0, current}
end
redis.call("SET", KEYS[2], ARGV[1], "PX", ARGV[2])
if current then
  if ARGV[3] == "keep" then
    return {1, 2}
  end
  redis.call("DEL", KEYS[1])
  return {1, 1}
end
return {1, 0}
