-- ratelab fenced write: the protected resource refuses any token below the highest it has
-- seen — written with an accepted write, or granted by the lease whose counter is KEYS[2] —
-- checked and written in one step.
--
-- KEYS[1]  the resource (a hash: token, value)
-- KEYS[2]  the lease's token counter
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the value
--
-- Returns {1, token} if written, {0, highest} if the token was stale.
local written = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local granted = tonumber(redis.call('GET', KEYS[2]) or '0')
local highest = math.max(written, granted)
local token = tonumber(ARGV[1])
if token < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, token}
