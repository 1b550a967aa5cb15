-- Acquire a lease. One atomic call; see docs/redis-contract.md.
--
-- KEYS[1]  lock key
-- KEYS[2]  occurrence done-marker key   (present when ARGV[5] == "1")
-- KEYS[n]  fence counter key            (last key; present unless ARGV[4] == "none")
-- ARGV[1]  token  "<cluster>/<namespace>/<job>#<random>"
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fence floor: the highest fence the caller handed out before (Strict), else 0
-- ARGV[4]  fencing policy: "none" | "inject" | "strict"
-- ARGV[5]  "1" when KEYS[2] is an occurrence marker
--
-- Nothing is written unless every key can be used: the types are checked first.
--
-- Returns one of
--   {"wrongtype", <key>, <type>}                   a key holds another type (or a
--                                                  fence that is not an integer)
--   {"done", <marker value>}                       the occurrence already succeeded;
--                                                  a lock holding the caller's own
--                                                  token was deleted
--   {"busy", <holder value>, <pttl ms>}            another token holds the lock
--   {"ok", <fence>, <raised 0|1>, <reentered 0|1>} the caller holds the lock now
local lock = KEYS[1]
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local policy = ARGV[4]

-- Every key is read once, up front. GET fails on a key of another type; only then
-- is its type looked up, for the reply.
local function read(key)
  local v = redis.pcall("GET", key)
  if type(v) == "table" and v.err then
    if string.find(v.err, "WRONGTYPE", 1, true) then
      return nil, redis.call("TYPE", key)["ok"]
    end
    return redis.call("GET", key) -- any other failure: raise it as it is
  end
  return v
end

local current, t = read(lock)
if t then
  return {"wrongtype", lock, t}
end
local done = false
if ARGV[5] == "1" then
  done, t = read(KEYS[2])
  if t then
    return {"wrongtype", KEYS[2], t}
  end
end
if policy ~= "none" then
  local fenceKey = KEYS[#KEYS]
  local v
  v, t = read(fenceKey)
  if t then
    return {"wrongtype", fenceKey, t}
  end
  if v and not string.match(v, "^%-?%d+$") then
    return {"wrongtype", fenceKey, "string"}
  end
end

if done then
  -- The caller may hold the key already (a retried call after a crash): a
  -- finished occurrence needs no lease, so it is released here.
  if current == token then
    redis.call("DEL", lock)
  end
  return {"done", done}
end

local reentered = 0
if current == token then
  -- The caller already holds the key (a retried call whose reply was lost). No Job
  -- got the earlier fence, so extend the lease and hand out a new one.
  redis.call("PEXPIRE", lock, ttl)
  reentered = 1
elseif current then
  return {"busy", current, redis.call("PTTL", lock)}
else
  redis.call("SET", lock, token, "PX", ttl)
end

if policy == "none" then
  return {"ok", 0, 0, reentered}
end

local fenceKey = KEYS[#KEYS]
local fence = redis.call("INCR", fenceKey)
local raised = 0
if policy == "strict" then
  -- Never hand out a fence at or below one handed out before, even when Redis
  -- lost the counter: the caller's floor and Redis' clock both bound it from below.
  -- Kept as Lua numbers (exact below 2^53); tostring() would lose digits.
  if fence <= floor then
    raised = 1
  end
  local t = redis.call("TIME")
  local fromClock = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) * 1024
  local best = math.max(fence, floor + 1, fromClock)
  if best > fence then
    redis.call("SET", fenceKey, best)
    fence = best
  end
end
return {"ok", fence, raised, reentered}
