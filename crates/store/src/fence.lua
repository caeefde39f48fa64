-- ratelab fenced write: the protected resource refuses any token below the highest it has
-- accepted, checked and written in one step.
--
-- KEYS[1]  the resource (a hash: token, value)
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the value
--
-- Returns {1, token} if written, {0, highest} if the token was stale.
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, token}
