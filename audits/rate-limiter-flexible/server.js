// rate-limiter-flexible behind a plain Node HTTP server, with the response headers its
// README recommends. LIMITER picks the class: atomic (RateLimiterRedis), non-atomic
// (RateLimiterRedisNonAtomic) or memory (RateLimiterMemory); INSURANCE=1 gives a Redis
// limiter the in-memory insurance limiter its docs describe for when Redis is down.
const http = require('http');
const Redis = require('ioredis');
const {
  RateLimiterRedis,
  RateLimiterRedisNonAtomic,
  RateLimiterMemory,
} = require('rate-limiter-flexible');

const opts = {
  points: Number(process.env.POINTS),
  duration: Number(process.env.DURATION),
  keyPrefix: 'rlflx',
};

// The Redis client is made as the README advises (no offline queue), and the server
// listens once it is connected. COMMAND_TIMEOUT_MS, if given, is ioredis's commandTimeout
// (unset by default: a command waits for its reply as long as the connection stays open).
let rateLimiter;
let ready;
if (process.env.LIMITER === 'memory') {
  rateLimiter = new RateLimiterMemory(opts);
  ready = Promise.resolve();
} else {
  const commandTimeout = Number(process.env.COMMAND_TIMEOUT_MS) || undefined;
  const storeClient = new Redis(process.env.REDIS_URL, { enableOfflineQueue: false, commandTimeout });
  const Class = process.env.LIMITER === 'atomic' ? RateLimiterRedis : RateLimiterRedisNonAtomic;
  const insuranceLimiter = process.env.INSURANCE === '1' ? new RateLimiterMemory(opts) : undefined;
  rateLimiter = new Class({ storeClient, insuranceLimiter, ...opts });
  ready = new Promise((resolve) => storeClient.once('ready', resolve));
}

function headers(res) {
  return {
    'Retry-After': res.msBeforeNext / 1000,
    'X-RateLimit-Limit': opts.points,
    'X-RateLimit-Remaining': res.remainingPoints,
    'X-RateLimit-Reset': Math.ceil((Date.now() + res.msBeforeNext) / 1000),
  };
}

const server = http.createServer(async (req, res) => {
  const key = req.headers['x-key'] || req.socket.remoteAddress;
  try {
    const r = await rateLimiter.consume(key);
    res.writeHead(200, headers(r));
    res.end('ok\n');
  } catch (r) {
    if (r instanceof Error) {
      res.writeHead(500);
      res.end(`${r.message}\n`);
    } else {
      res.writeHead(429, headers(r));
      res.end('Too Many Requests\n');
    }
  }
});
ready.then(() => server.listen(Number(process.env.PORT), '127.0.0.1'));
