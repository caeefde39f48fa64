-- ratelab token bucket refund: gives back what an admitted request spent at its buckets,
-- when a request spanning several Redis Cluster slots was denied in another slot (one script
-- cannot span slots, so such a request is decided slot by slot and undone where it was
-- admitted).
--
-- KEYS     the bucket keys of one slot
-- ARGV     now_sec, now_nsec (the clock the decision used; now_sec = '' reads TIME), then per
--          key: refill_amount, refill_period_ns, cost, tat_hi, tat_lo (the TAT the request's
--          own decision wrote, from token_bucket.lua's 'tat' reply)
-- reply    per key: the scaled units given back (0 when nothing was outstanding)
--
-- The state is token_bucket.lua's "hi lo" (TAT = hi seconds plus lo / refill_amount ns).
-- Spending `cost` moved the TAT later by cost * refill_period in scaled units; only the part
-- of that still ahead of now is outstanding (the rest has refilled already), and only if the
-- bucket still holds the request's write (a state older than it, as after a failover that
-- lost the write, gets nothing back). Moving the TAT back by the outstanding part leaves every
-- later request's spend in place: spends add to the TAT. The key's expiry is kept: it was set
-- for a later TAT, so it never expires a bucket early.
local ns, nn
if ARGV[1] == '' then
  local t = redis.call('TIME')
  ns = tonumber(t[1])
  nn = tonumber(t[2]) * 1000
else
  ns = tonumber(ARGV[1])
  nn = tonumber(ARGV[2])
end
local reply = {}
for i = 1, #KEYS do
  local at = 2 + 5 * (i - 1)
  local a, P, c = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local wh, wl = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
  local U = 1000000000 * a
  local back = 0
  local s = redis.call('GET', KEYS[i])
  if s then
    local h, l = string.match(s, '^(%d+) (%d+)$')
    if not h or #h > 15 or #l > 16 or tonumber(l) >= U then
      return redis.error_reply('CORRUPT ratelab: unreadable bucket state')
    end
    h, l = tonumber(h), tonumber(l)
    local held = h > wh or (h == wh and l >= wl)
    -- How far the written TAT lies after now, in scaled units (both below 2^53: the caller
    -- checks that B * P is).
    local ahead = (wh - ns) * U + (wl - nn * a)
    if held and ahead > 0 then
      back = math.min(c * P, ahead)
      local borrow = math.floor(back / U)
      if borrow * U > back then borrow = borrow - 1 end
      if (borrow + 1) * U <= back then borrow = borrow + 1 end
      l = l - (back - borrow * U)
      h = h - borrow
      if l < 0 then
        l = l + U
        h = h - 1
      end
      redis.call('SET', KEYS[i], string.format('%d %d', h, l), 'KEEPTTL')
    end
  end
  table.insert(reply, back)
end
return reply
