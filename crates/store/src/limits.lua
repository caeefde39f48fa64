-- ratelab's limiter families, every one, in one atomic step over one key or several (one
-- request at several limits, of any families: all or nothing), computing exactly what
-- ratelab-core's transitions compute. The token bucket is token_bucket.lua's own code: the
-- lines it marks as shared are put in below, where this script marks it (crate
-- ratelab-store, `redis_limits::LIMITS_SCRIPT`); this file alone is not a script.
--
-- KEYS     the state keys, one per limit
-- ARGV     now_sec, now_nsec (now_sec = '' reads the store's clock with TIME), then five per
--          key: family, a, b, c, cost, where family is
--            'tb' token bucket (GCRA)                    a = capacity, b = refill_amount,
--                                                        c = refill_period_ns
--            'fw' fixed window aligned to the clock      a = limit, b = window_ns
--            'fh' fixed window opened by the first hit   a = limit, b = window_ns
--            'sw' sliding-window counter                 a = limit, b = window_ns
--            'sb' token bucket refilled in whole steps   a = capacity, b = refill_amount,
--                                                        c = refill_period_ns
--          (c is ignored by the windows); and optionally 'state' after the last key's five
-- reply    per key: flag, remaining, reset_after_ns, retry_after_ns (-1: none),
--          full_after_ns; then now_sec, now_nsec. flag 1: admitted and spent; 0: this key
--          denied it; 2: this key would admit it but another denied it, so nothing was spent
--          (the other figures are what the key holds now, as if asked for nothing). With
--          'state', the reply is two arrays: those figures, and per key the state written
--          ('' where nothing was), which a caller that may have to give the request back
--          needs (refund.lua).
--
-- A stored value this script did not write (other than its fields, a count above the limit)
-- or a state more than 2^52 ns (about 52 days) ahead of the clock is refused with a CORRUPT
-- error and nothing written: never read as some other state. (The core would count on from
-- a state that far ahead; a store clock stepped back that far is not decided here.)
--
-- Times are (seconds, nanoseconds) pairs, durations nanoseconds below 2^52, counts below
-- 2^40 (the caller checks the policies' bounds): every intermediate is an integer below 2^53,
-- which Lua's doubles hold exactly. A product that would not be is computed bit by bit.
-- ratelab:common begin (refund.lua runs these lines too: the clock and the stored fields)
local ns, nn
if ARGV[1] == '' then
  local t = redis.call('TIME')
  ns = tonumber(t[1])
  nn = tonumber(t[2]) * 1000
else
  ns = tonumber(ARGV[1])
  nn = tonumber(ARGV[2])
end
local E9 = 1000000000
-- Beyond this many seconds apart, two instants are further apart than any window or fill
-- time the caller admits (2^52 ns).
local FAR = 4503599

-- The n decimal fields of a stored state, each of at most 16 digits and separated by one
-- space; nil for anything else, and for no state (a value this script did not write is
-- refused, never read as some other state).
local function field(s, n)
  if not s then return nil end
  local out = {string.match(s, '^' .. string.rep('(%d+) ', n - 1) .. '(%d+)$')}
  if #out ~= n then return nil end
  for i, v in ipairs(out) do
    if #v > 16 then return nil end
    out[i] = tonumber(v)
  end
  return out
end
-- ratelab:common end

-- ratelab:shared here

-- floor(x * y / d) and ceil(x * y / d) for x < 2^40 and y, d < 2^52, bit by bit over x so
-- every intermediate stays below 2^53 (a quotient of 2^53 or more is only as large).
local function muldiv(x, y, d)
  local q, r = 0, 0
  for bit = 39, 0, -1 do
    q, r = 2 * q, 2 * r
    if r >= d then q, r = q + 1, r - d end
    local p = 2 ^ bit
    if x >= p then
      x = x - p
      r = r + y
      local t = idiv(r, d)
      q, r = q + t, r - t * d
    end
  end
  if r > 0 then return q, q + 1 end
  return q, q
end

-- now = q * w + r, 0 <= r < w, for w < 2^52: the window holding now and how far into it.
local function divnow(w)
  local sh = math.floor(ns / 65536)
  local a = sh * E9
  local b = (ns - sh * 65536) * E9 + nn
  local q = idiv(a, w)
  local r = a - q * w
  for _ = 1, 16 do
    q, r = 2 * q, 2 * r
    if r >= w then q, r = q + 1, r - w end
  end
  r = r + b
  local k = idiv(r, w)
  return q + k, r - k * w
end

-- t - now in ns for an instant t = (s, n), or nil when further than 2^52 ns either way.
local function since(s, n)
  local ds = s - ns
  if ds > FAR or ds < -FAR then return nil end
  return ds * E9 + (n - nn)
end

-- now + d for |d| < 2^53 ns, as (s, n) with 0 <= n < 10^9.
local function after(d)
  local t = nn + d
  local c = idiv(t, E9)
  return ns + c, t - c * E9
end

-- Each family: decide(k) fills k.admits, k.next (the state string to write), k.ttl (ns) and
-- the decision's figures for both outcomes: spent (k.r1, k.reset1, k.full1) and unspent
-- (k.r0, k.reset0, k.full0, k.wait0).

-- A window that counts up to its limit a, holding count, whose end is until_end away: the
-- figures both fixed windows report (nothing is held back once it is empty).
local function counted(k, count, until_end)
  local function figures(n)
    local whole = 0
    if n > 0 then whole = until_end end
    return k.a - n, whole, whole
  end
  k.admits = count + k.c <= k.a
  k.r1, k.reset1, k.full1 = figures(count + k.c)
  k.r0, k.reset0, k.full0 = figures(count)
  k.wait0 = until_end
end

-- The fixed window aligned to the clock: (index, count).
local function fixed(k)
  local w = k.b
  local index, r = divnow(w)
  local win, count = index, 0
  if k.s then
    local st = field(k.s, 2)
    if not st or st[2] > k.a then return false end
    if st[1] >= index then win, count = st[1], st[2] end
  end
  local ahead = 0
  if win > index then
    if (win - index) > FAR * E9 / w then return false end
    ahead = (win - index) * w
  end
  local until_end = ahead + w - r
  counted(k, count, until_end)
  k.next = string.format('%d %d', win, count + k.c)
  k.ttl = until_end
  return true
end

-- The fixed window opened by a key's first request: (start_sec, start_nsec, count).
local function first_hit(k)
  local w = k.b
  local ss, sn, count = ns, nn, 0
  local elapsed = 0
  if k.s then
    local st = field(k.s, 3)
    if not st or st[2] >= E9 or st[3] > k.a then return false end
    local d = since(st[1], st[2])
    if d == nil then
      -- More than 2^52 ns before now: long over; after it: a clock far behind the state's.
      if st[1] < ns then d = -w else return false end
    end
    if -d < w then ss, sn, count, elapsed = st[1], st[2], st[3], -d end
  end
  local until_end = w - elapsed
  counted(k, count, until_end)
  k.next = string.format('%d %d %d', ss, sn, count + k.c)
  k.ttl = until_end
  return true
end

-- The sliding-window counter: (index, current, previous).
local function sliding(k)
  local limit, w = k.a, k.b
  local index, r = divnow(w)
  local win, cur, prev = index, 0, 0
  if k.s then
    local st = field(k.s, 3)
    if not st or st[2] > limit or st[3] > limit then return false end
    if st[1] >= index then
      win, cur, prev = st[1], st[2], st[3]
    elseif st[1] + 1 == index then
      prev = st[2]
    end
  end
  local elapsed, ahead = r, 0
  if win > index then
    if (win - index) > FAR * E9 / w then return false end
    elapsed, ahead = 0, (win - index) * w - r
  end
  local function available(c)
    local _, weighted = muldiv(prev, w - elapsed, w)
    local used = weighted + c
    if used >= limit then return 0 end
    return limit - used
  end
  local function wait_for(c, n)
    if available(c) >= n then return 0 end
    local to_boundary = w - elapsed
    if c + n <= limit and prev > 0 then
      local d = to_boundary - muldiv(limit - n - c, w, prev)
      if d < to_boundary then
        if d < 0 then d = 0 end
        return d
      end
    end
    if c == 0 then return to_boundary end
    local e = w - muldiv(limit - n, w, c)
    if e < 0 then e = 0 end
    return to_boundary + e
  end
  local function full_after(c)
    local to_boundary = ahead + w - elapsed
    if prev == 0 and c == 0 then return 0 end
    if c == 0 then return to_boundary end
    return to_boundary + w
  end
  local function figures(c)
    local left = available(c)
    local reset = 0
    if left < limit then reset = ahead + wait_for(c, left + 1) end
    return left, reset, full_after(c)
  end
  k.admits = available(cur) >= k.c
  k.r1, k.reset1, k.full1 = figures(cur + k.c)
  k.r0, k.reset0, k.full0 = figures(cur)
  k.wait0 = ahead + wait_for(cur, k.c)
  k.next = string.format('%d %d %d', win, cur + k.c, prev)
  k.ttl = ahead + 2 * w - elapsed
  return true
end

-- The token bucket refilled in whole steps: (tokens, anchor_sec, anchor_nsec).
local function stepped(k)
  local cap, amount, period = k.a, k.b, k.c0
  local tokens, as, an = cap, ns, nn
  if k.s then
    local st = field(k.s, 3)
    if not st or st[1] > cap or st[3] >= E9 then return false end
    tokens, as, an = st[1], st[2], st[3]
    local d = since(as, an)
    if d == nil then
      if as < ns then d = -cdiv(cap, amount) * period else return false end
    end
    if d < 0 then
      local steps = idiv(-d, period)
      if steps * amount >= cap - tokens then
        tokens, as, an = cap, ns, nn
      else
        tokens = tokens + steps * amount
        as, an = after(d + steps * period)
      end
    end
  end
  -- How long until the bucket holds n more than it does, from its anchor; 0 if full.
  local anchor = since(as, an)
  local function until_more(n)
    return anchor + cdiv(n, amount) * period
  end
  local function figures(t)
    if t == cap then return t, 0, 0 end
    return t, until_more(1), until_more(cap - t)
  end
  k.admits = tokens >= k.c
  k.r1, k.reset1, k.full1 = figures(tokens - k.c)
  k.r0, k.reset0, k.full0 = figures(tokens)
  if not k.admits then k.wait0 = until_more(k.c - tokens) end
  local left = tokens - k.c
  if left >= cap then
    k.ttl = anchor
  else
    k.ttl = until_more(cap - left)
  end
  k.next = string.format('%d %d %d', left, as, an)
  return true
end

-- The token bucket, by token_bucket.lua's functions: its state "hi lo" as that script writes
-- it.
local function token_bucket(k)
  local b = bucket(k.s, k.a, k.b, k.c0, k.c)
  if not b then return false end
  local d = over(b, b.nh, b.nl)
  k.admits = d <= b.burst
  k.r1 = available(b, b.nh, b.nl)
  k.reset1 = reset_after(b, b.nh, b.nl, k.r1)
  k.full1 = cdiv(d, b.a)
  k.r0 = available(b, b.th, b.tl)
  k.reset0 = reset_after(b, b.th, b.tl, k.r0)
  k.full0 = wait_ns(b, b.th, b.tl, 0)
  k.wait0 = wait_for(b, b.th, b.tl, b.c)
  k.next = string.format('%d %d', b.nh, b.nl)
  k.ttl = cdiv(d, b.a)
  return true
end

local families = {tb = token_bucket, fw = fixed, fh = first_hit, sw = sliding, sb = stepped}

local keys = {}
local all = true
for i = 1, #KEYS do
  local at = 5 * i - 2
  local decide = families[ARGV[at]]
  if not decide then
    return redis.error_reply('ERR ratelab: unknown family ' .. tostring(ARGV[at]))
  end
  local k = {a = tonumber(ARGV[at + 1]), b = tonumber(ARGV[at + 2]),
    c0 = tonumber(ARGV[at + 3]), c = tonumber(ARGV[at + 4])}
  k.s = redis.call('GET', KEYS[i])
  if not decide(k) then
    return redis.error_reply('CORRUPT ratelab: unreadable limit state')
  end
  all = all and k.admits
  keys[i] = k
end

local reply = {}
for i, k in ipairs(keys) do
  if all then
    local ttl_ms = cdiv(k.ttl, 1000000)
    if ttl_ms < 1 then ttl_ms = 1 end
    redis.call('SET', KEYS[i], k.next, 'PX', ttl_ms)
    for _, v in ipairs({1, k.r1, k.reset1, -1, k.full1}) do table.insert(reply, v) end
  elseif k.admits then
    for _, v in ipairs({2, k.r0, k.reset0, -1, k.full0}) do table.insert(reply, v) end
  else
    for _, v in ipairs({0, k.r0, k.reset0, k.wait0, k.full0}) do table.insert(reply, v) end
  end
end
table.insert(reply, ns)
table.insert(reply, nn)
if ARGV[5 * #KEYS + 3] == 'state' then
  local written = {}
  for i, k in ipairs(keys) do
    if all then written[i] = k.next else written[i] = '' end
  end
  return {reply, written}
end
return reply
