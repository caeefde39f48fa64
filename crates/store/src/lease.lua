-- ratelab leases: set-if-absent with expiry, renew and release by the holder only, and a
-- fencing token from a counter that only grows.
--
-- KEYS[1]  the lease ("owner token", with a PX expiry)
-- KEYS[2]  the token counter (no expiry: it must outlive every lease)
-- ARGV[1]  'acquire' | 'renew' | 'release'
-- ARGV[2]  owner
-- ARGV[3]  acquire: ttl ms; renew, release: the holder's token
-- ARGV[4]  renew: ttl ms
--
-- acquire returns the new token, or 0 if the lease is held; renew and release return 1 if done.
local op = ARGV[1]
if op == 'acquire' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. token, 'PX', ARGV[3])
  return token
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] .. ' ' .. ARGV[3] then
  return 0
end
if op == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
if op == 'release' then
  redis.call('DEL', KEYS[1])
  return 1
end
return redis.error_reply('unknown lease operation ' .. op)
