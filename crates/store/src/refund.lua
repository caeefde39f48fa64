-- ratelab token bucket refund: gives back what an admitted request spent at one bucket, when
-- a request spanning several Redis Cluster slots was denied in another slot (one script
-- cannot span slots, so such a request is decided slot by slot and undone where it was
-- admitted).
--
-- KEYS     the bucket key
-- ARGV     refill_amount, refill_period_ns, cost
-- reply    1 if the bucket held a state to give back to, 0 if it had none (expired)
--
-- Spending `cost` moved the bucket's TAT later by cost * refill_period / refill_amount; the
-- refund moves it back by the same amount, in the same "hi lo" representation as
-- token_bucket.lua (TAT = hi seconds plus lo / refill_amount ns). A TAT that falls before now
-- is a full bucket to the next decision, which reads max(TAT, now). The key's expiry is kept:
-- it was set for the later TAT, so it never expires a bucket early.
local s = redis.call('GET', KEYS[1])
if not s then
  return 0
end
local h, l = string.match(s, '^(%d+) (%d+)$')
local a, P, c = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local U = 1000000000 * a
if not h or #h > 15 or #l > 16 or tonumber(l) >= U then
  return redis.error_reply('CORRUPT ratelab: unreadable bucket state')
end
h, l = tonumber(h), tonumber(l)
local back = c * P
-- Borrow whole seconds from hi so that 0 <= lo < U; back < 2^53 as the caller checks.
local borrow = math.floor(back / U)
if borrow * U > back then borrow = borrow - 1 end
if (borrow + 1) * U <= back then borrow = borrow + 1 end
l = l - (back - borrow * U)
h = h - borrow
if l < 0 then
  l = l + U
  h = h - 1
end
if h < 0 then
  h, l = 0, 0
end
redis.call('SET', KEYS[1], string.format('%d %d', h, l), 'KEEPTTL')
return 1
