-- ratelab leases: set-if-absent with expiry, renew and release by the holder only, and a
-- fencing token that only grows: the later of one more than the last token and the server's
-- clock in µs (TIME). A server that lost the last token (a restart without persistence, a
-- promoted replica the last grants had not reached) still grants a larger token than any
-- granted before, as long as its clock is ahead of theirs.
--
-- KEYS[1]  the lease ("owner token", with a PX expiry)
-- KEYS[2]  the last token (no expiry: it must outlive every lease)
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
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  -- Below 2^53 (µs since 1970 until the year 2255): exact in a Lua number, and written out
  -- in full digits rather than Lua's 14-digit default.
  local token = string.format('%d', math.max(last + 1, now_us))
  redis.call('SET', KEYS[2], token)
  redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. token, 'PX', ARGV[3])
  return tonumber(token)
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
