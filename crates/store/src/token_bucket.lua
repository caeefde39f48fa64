-- ratelab token bucket: GCRA over exact scaled time, in one atomic step, over one key or
-- several (one request at several limits: all or nothing).
--
-- KEYS     the bucket keys, one per limit
-- ARGV     capacity, refill_amount, refill_period_ns, cost, now_sec, now_nsec for KEYS[1]
--          (now_sec = '' reads the store's clock with TIME), then capacity, refill_amount,
--          refill_period_ns, cost for each further key
-- reply    per key: flag, remaining, reset_after_ns, retry_after_ns (-1: none), with
--          now_sec, now_nsec after the first key's four; then per key full_after_ns, the
--          time until its bucket is full again if nothing more is taken. flag 1: admitted and spent; 0: this
--          key denied it; 2: this key would admit it but another denied it, so nothing was
--          spent (remaining is what the key holds now). The request is admitted only if
--          every key admits it, and then it is spent at every key; otherwise at none.
--
-- An optional ARGV after the last key's four, 'tat', appends each key's TAT after this
-- request as two more integers per key (hi, lo; as stored when the request was admitted): a
-- caller that may have to give the request back needs them (refund.lua).
--
-- The state is the theoretical arrival time TAT, stored as "hi lo": TAT = hi seconds plus
-- lo / refill_amount nanoseconds, 0 <= lo < 1e9 * refill_amount. Splitting at the second
-- keeps every intermediate an integer below 2^53, so Lua's doubles compute exactly what the
-- Rust core computes in 128-bit integers (the caller checks the policy's bounds). A state more
-- than 4 503 599 whole seconds (2^52 ns) ahead of the clock (one set back that far) is refused
-- with a CORRUPT error, as limits.lua refuses every family's: its waits would pass what the
-- doubles hold exactly.
local ns, nn
if ARGV[5] == '' then
  local t = redis.call('TIME')
  ns = tonumber(t[1])
  nn = tonumber(t[2]) * 1000
else
  ns = tonumber(ARGV[5])
  nn = tonumber(ARGV[6])
end

-- ratelab:shared begin (limits.lua runs these lines too, after its own clock reading)

-- floor(x / y) for integers x, y below 2^53 in magnitude, y > 0, corrected for rounding in
-- x / y.
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

-- How far (h, l) lies after now, in scaled units; 0 if not after. Exact while that is below
-- 2^53 (the state no further ahead than a burst, unless the clock was set back); further,
-- only good for telling that it is past a burst.
local function over(k, h, l)
  if h < ns or (h == ns and l <= k.now_lo) then return 0 end
  return (h - ns) * k.U + (l - k.now_lo)
end

-- ceil((over(k, h, l) + x) / a) ns, or 0 if that is not positive: how long until (h, l), less
-- x scaled units, is no later than now. The whole seconds after now count 1e9 ns each, apart
-- from the rest, so that a state far ahead of the clock (one set back) stays exact, where
-- over() is those seconds times U.
local function wait_ns(k, h, l, x)
  local s, rest = 0, x
  if h > ns or (h == ns and l > k.now_lo) then
    s, rest = h - ns, l - k.now_lo + x
  end
  local w = s * 1000000000 + cdiv(rest, k.a)
  if w < 0 then return 0 end
  return w
end

-- One key's bucket: its policy, its stored state s (false: none), and what one request
-- would do to it.
local function bucket(s, B, a, P, c)
  local k = {B = B, a = a, P = P, c = c, U = 1000000000 * a, burst = B * P}
  k.now_lo = nn * a
  local th, tl = ns, k.now_lo
  if s then
    -- A value this script did not write is refused, never read as some other bucket: two
    -- decimal integers, hi of at most 15 digits and lo of at most 16 (both below 2^53, where
    -- tonumber is exact), lo below U.
    local h, l = string.match(s, '^(%d+) (%d+)$')
    if not h or #h > 15 or #l > 16 or tonumber(l) >= k.U then
      return nil
    end
    th = tonumber(h)
    tl = tonumber(l)
    -- A state whose second lies more than 4 503 599 s (2^52 ns) after the clock's is refused,
    -- as limits.lua refuses every family's (its FAR): its waits would pass what this
    -- arithmetic holds exactly.
    if th - ns > 4503599 then
      return nil
    end
  end
  k.th, k.tl = th, tl
  local bh, bl = th, tl
  if th < ns or (th == ns and tl < k.now_lo) then
    bh, bl = ns, k.now_lo
  end
  local nl = bl + c * P
  local carry = idiv(nl, k.U)
  k.nh = bh + carry
  k.nl = nl - carry * k.U
  return k
end

local function available(k, h, l)
  local d = over(k, h, l)
  if d >= k.burst then return 0 end
  return idiv(k.burst - d, k.P)
end

local function wait_for(k, h, l, n)
  return wait_ns(k, h, l, n * k.P - k.burst)
end

local function reset_after(k, h, l, r)
  if r >= k.B then return 0 end
  return wait_for(k, h, l, r + 1)
end

-- ratelab:shared end

local keys = {}
local all = true
for i = 1, #KEYS do
  -- KEYS[1]'s policy is ARGV[1..4] (then the time); KEYS[i]'s, for i > 1, ARGV[4i-1 .. 4i+2].
  local at = 1
  if i > 1 then at = 4 * i - 1 end
  local k = bucket(redis.call('GET', KEYS[i]), tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
    tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]))
  if not k then
    return redis.error_reply('CORRUPT ratelab: unreadable bucket state')
  end
  k.admits = over(k, k.nh, k.nl) <= k.burst
  all = all and k.admits
  keys[i] = k
end

local reply = {}
local full = {}
for i, k in ipairs(keys) do
  local flag, r, reset, wait
  if all then
    local d = over(k, k.nh, k.nl)
    r = available(k, k.nh, k.nl)
    local ttl_ms = cdiv(cdiv(d, k.a), 1000000)
    if ttl_ms < 1 then ttl_ms = 1 end
    redis.call('SET', KEYS[i], string.format('%d %d', k.nh, k.nl), 'PX', ttl_ms)
    flag, reset, wait = 1, reset_after(k, k.nh, k.nl, r), -1
    full[i] = cdiv(d, k.a)
  else
    r = available(k, k.th, k.tl)
    reset = reset_after(k, k.th, k.tl, r)
    full[i] = wait_ns(k, k.th, k.tl, 0)
    if k.admits then
      flag, wait = 2, -1
    else
      flag, wait = 0, wait_for(k, k.th, k.tl, k.c)
    end
  end
  table.insert(reply, flag)
  table.insert(reply, r)
  table.insert(reply, reset)
  table.insert(reply, wait)
  if i == 1 then
    table.insert(reply, ns)
    table.insert(reply, nn)
  end
end
for i = 1, #keys do
  table.insert(reply, full[i])
end
if ARGV[4 * #KEYS + 3] == 'tat' then
  for _, k in ipairs(keys) do
    table.insert(reply, k.nh)
    table.insert(reply, k.nl)
  end
end
return reply
