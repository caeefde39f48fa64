-- ratelab refund: gives back what an admitted request spent at its limits, of any family, when
-- a request spanning several Redis Cluster slots was denied in another slot (one script cannot
-- span slots, so such a request is decided slot by slot and undone where it was admitted).
--
-- KEYS     the state keys of one slot
-- ARGV     now_sec, now_nsec (the clock the decision used; now_sec = '' reads TIME), then six
--          per key: family, a, b, c (as limits.lua takes them), cost, and the state the
--          request's own decision wrote (limits.lua's or token_bucket.lua's, as stored)
-- reply    per key: what was given back (a count, tokens, or for a token bucket how far its
--          TAT moved back, in 1/refill_amount ns), 0 when nothing was outstanding
--
-- Only what is still outstanding comes back: a window that has moved on holds nothing of the
-- request, a bucket that has refilled since holds only the part not yet refilled. A token
-- bucket gives back only from a TAT at least the one the request wrote (one older, as after a
-- failover that lost the write, gets nothing; so does one another refund already moved back:
-- of two requests refunded at one bucket, the later-written's spend stays until it refills).
-- A window gives back while it is the request's window: a failover that lost the write but
-- kept later counts in that window can give back another request's spend instead (at most
-- this request's cost). A stepped bucket gives back only from the state the request wrote.
-- Counts and TATs add up, so taking back one request's spend leaves every later request's in
-- place. The key's expiry is kept: it was set for the state with the spend in it, which lives
-- at least as long as the state without.
--
-- The clock reading and the reading of a stored state's fields are limits.lua's own lines,
-- the integer division token_bucket.lua's: each put in below, where this script marks it
-- (crate ratelab-store, `script::REFUND_SCRIPT`); this file alone is not a script.
-- ratelab:common here
-- ratelab:shared here

-- A state's fields as the scripts write them: decimal integers, one space apart.
local function join(s)
  local out = {}
  for i, v in ipairs(s) do out[i] = string.format('%d', v) end
  return table.concat(out, ' ')
end

-- Each family: refund(k) returns the state to write (nil: nothing to give back; '': none,
-- the key goes) and what it gives back. k.s is the stored state, k.w the request's written one.

-- A token bucket ("hi lo", TAT = hi s + lo / refill_amount ns): spending moved its TAT later
-- by cost * period; the part still ahead of now is outstanding.
local function token_bucket(k)
  local a, P = k.b, k.c0
  local U = E9 * a
  local s, w = field(k.s, 2), field(k.w, 2)
  if not s or not w or s[2] >= U or w[2] >= U then return nil, 0 end
  local h, l = s[1], s[2]
  local held = h > w[1] or (h == w[1] and l >= w[2])
  local ds = w[1] - ns
  if not held or ds < -FAR then return nil, 0 end
  -- (Further ahead than any spend: the whole spend is outstanding.)
  if ds > FAR then ds = FAR end
  local ahead = ds * U + (w[2] - nn * a)
  if ahead <= 0 then return nil, 0 end
  local back = math.min(k.c * P, ahead)
  local borrow = idiv(back, U)
  l = l - (back - borrow * U)
  h = h - borrow
  if l < 0 then l, h = l + U, h - 1 end
  return string.format('%d %d', h, l), back
end

-- A window counting in its first fields' window (fw: index count; fh: start_sec start_nsec
-- count): the spend is outstanding while the window is the request's. A first-hit window
-- left empty was opened by the request: it goes, as if never opened ('' deletes the key).
local function counted(n, opened)
  return function(k)
    local s, w = field(k.s, n), field(k.w, n)
    if not s or not w then return nil, 0 end
    for i = 1, n - 1 do
      if s[i] ~= w[i] then return nil, 0 end
    end
    local back = math.min(k.c, s[n])
    if back == 0 then return nil, 0 end
    s[n] = s[n] - back
    if opened and s[n] == 0 then return '', back end
    return join(s), back
  end
end

-- The sliding-window counter (index current previous): the spend counts in its window, and
-- in the next one as the previous window's count.
local function sliding(k)
  local s, w = field(k.s, 3), field(k.w, 3)
  if not s or not w then return nil, 0 end
  local at
  if s[1] == w[1] then at = 2 elseif s[1] == w[1] + 1 then at = 3 else return nil, 0 end
  local back = math.min(k.c, s[at])
  if back == 0 then return nil, 0 end
  s[at] = s[at] - back
  return join(s), back
end

-- The stepped bucket (tokens anchor_sec anchor_nsec): only from the very state the request
-- wrote. Once another request has decided on it, the request's spend may have changed where
-- that one anchored the bucket (a bucket found full is anchored anew; a refill that would
-- have filled it is one), and the tokens alone cannot be given back without leaving a bucket
-- that refills sooner than the core's would: nothing is given back then.
local function stepped(k)
  local cap = k.a
  local s, w = field(k.s, 3), field(k.w, 3)
  if not s or not w or s[1] ~= w[1] or s[2] ~= w[2] or s[3] ~= w[3] then return nil, 0 end
  local back = math.min(k.c, cap - s[1])
  if back <= 0 then return nil, 0 end
  s[1] = s[1] + back
  return join(s), back
end

local families = {tb = token_bucket, fw = counted(2, false), fh = counted(3, true), sw = sliding,
  sb = stepped}

local reply = {}
for i = 1, #KEYS do
  local at = 6 * i - 3
  local refund = families[ARGV[at]]
  if not refund then
    return redis.error_reply('ERR ratelab: unknown family ' .. tostring(ARGV[at]))
  end
  local k = {a = tonumber(ARGV[at + 1]), b = tonumber(ARGV[at + 2]),
    c0 = tonumber(ARGV[at + 3]), c = tonumber(ARGV[at + 4]), w = ARGV[at + 5]}
  k.s = redis.call('GET', KEYS[i])
  local next, back = refund(k)
  if next == '' then
    redis.call('DEL', KEYS[i])
  elseif next then
    redis.call('SET', KEYS[i], next, 'KEEPTTL')
  end
  table.insert(reply, back)
end
return reply
