-- Raise a fence counter to at least a value (Redlock mode). See docs/lock-stores.md.
--
-- KEYS[1]  fence counter key
-- ARGV[1]  the fence just handed out
--
-- Every node an acquisition reached gets the fence it handed out, so that any
-- later majority, which shares a node with this one, counts from above it.
-- Returns the counter's value afterwards, or {"wrongtype"} when it is not a number.
local v = tonumber(ARGV[1])
local cur = redis.call("GET", KEYS[1])
if cur and not string.match(cur, "^%-?%d+$") then
  return {"wrongtype"}
end
cur = tonumber(cur or "0")
if cur < v then
  redis.call("SET", KEYS[1], v)
  return v
end
return cur
