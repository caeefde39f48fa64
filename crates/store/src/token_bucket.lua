-- ratelab token bucket: GCRA over exact scaled time, in one atomic step.
--
-- KEYS[1]  the bucket key
-- ARGV     capacity, refill_amount, refill_period_ns, cost, now_sec, now_nsec
--          (now_sec = '' reads the store's clock with TIME)
--
-- The state is the theoretical arrival time TAT, stored as "hi lo": TAT = hi seconds plus
-- lo / refill_amount nanoseconds, 0 <= lo < 1e9 * refill_amount. Splitting at the second
-- keeps every intermediate an integer below 2^53, so Lua's doubles compute exactly what the
-- Rust core computes in 128-bit integers (the caller checks the policy's bounds).
local B = tonumber(ARGV[1])
local a = tonumber(ARGV[2])
local P = tonumber(ARGV[3])
local c = tonumber(ARGV[4])
local ns, nn
if ARGV[5] == '' then
  local t = redis.call('TIME')
  ns = tonumber(t[1])
  nn = tonumber(t[2]) * 1000
else
  ns = tonumber(ARGV[5])
  nn = tonumber(ARGV[6])
end
local U = 1000000000 * a
local burst = B * P
local now_lo = nn * a

-- floor(x / y) for non-negative integers below 2^53, corrected for rounding in x / y.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

local function cdiv(x, y)
  local q = idiv(x, y)
  if q * y < x then q = q + 1 end
  return q
end

-- How far (h, l) lies after now, in scaled units; 0 if not after.
local function over(h, l)
  if h < ns or (h == ns and l <= now_lo) then return 0 end
  return (h - ns) * U + (l - now_lo)
end

local function available(h, l)
  local d = over(h, l)
  if d >= burst then return 0 end
  return idiv(burst - d, P)
end

local function wait_for(h, l, n)
  local need = over(h, l) + n * P - burst
  if need <= 0 then return 0 end
  return cdiv(need, a)
end

local function reset_after(h, l, r)
  if r >= B then return 0 end
  return wait_for(h, l, r + 1)
end

local th, tl = ns, now_lo
local s = redis.call('GET', KEYS[1])
if s then
  -- A value this script did not write is refused, never read as some other bucket: two
  -- decimal integers, hi of at most 15 digits and lo of at most 16 (both below 2^53, where
  -- tonumber is exact), lo below U.
  local h, l = string.match(s, '^(%d+) (%d+)$')
  if not h or #h > 15 or #l > 16 or tonumber(l) >= U then
    return redis.error_reply('CORRUPT ratelab: unreadable bucket state')
  end
  th = tonumber(h)
  tl = tonumber(l)
end

local bh, bl = th, tl
if th < ns or (th == ns and tl < now_lo) then
  bh, bl = ns, now_lo
end
local nl = bl + c * P
local carry = idiv(nl, U)
local nh = bh + carry
nl = nl - carry * U

local d = over(nh, nl)
if d <= burst then
  local r = available(nh, nl)
  local ttl_ms = cdiv(cdiv(d, a), 1000000)
  if ttl_ms < 1 then ttl_ms = 1 end
  redis.call('SET', KEYS[1], string.format('%d %d', nh, nl), 'PX', ttl_ms)
  return {1, r, reset_after(nh, nl, r), -1, ns, nn}
end
local r = available(th, tl)
return {0, r, reset_after(th, tl, r), wait_for(th, tl, c), ns, nn}
