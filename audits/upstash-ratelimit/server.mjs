// @upstash/ratelimit behind a plain Node HTTP server, on a local redis-server, with the
// X-RateLimit-* headers its examples set. The library reaches Redis through the client it is
// given: in production @upstash/redis over Upstash's REST API, here an object with the two
// calls limit() makes (evalsha, then eval on NOSCRIPT) speaking to redis-server through
// ioredis. Upstash's server takes a script flag, allow-key-locking, that redis-server
// refuses; the adapter drops that flag from a script's first line and changes nothing else.
import http from 'node:http';
import { createHash } from 'node:crypto';
import Redis from 'ioredis';
import { Ratelimit } from '@upstash/ratelimit';

const client = new Redis(process.env.REDIS_URL);
const sha1 = (text) => createHash('sha1').update(text).digest('hex');

function stock(script) {
  const [first, ...rest] = script.split('\n');
  if (!first.startsWith('#!lua')) return script;
  const kept = first.replace(/flags=(\S*)/, (_, flags) => {
    const left = flags.split(',').filter((f) => f && f !== 'allow-key-locking');
    return left.length ? `flags=${left.join(',')}` : '';
  });
  return [kept.trimEnd(), ...rest].join('\n');
}

// The library's hash of a script → the hash of the script redis-server was given.
const hashes = new Map();
const redis = {
  evalsha: (hash, keys, args) => client.evalsha(hashes.get(hash) ?? hash, keys.length, ...keys, ...args),
  eval: (script, keys, args) => {
    const given = stock(script);
    hashes.set(sha1(script), sha1(given));
    return client.eval(given, keys.length, ...keys, ...args);
  },
};

const limit = Number(process.env.LIMIT);
const window = process.env.WINDOW;
const limiter = process.env.ALGORITHM === 'sliding-window'
  ? Ratelimit.slidingWindow(limit, window)
  : Ratelimit.fixedWindow(limit, window);
// `timeout`: a call to Redis that takes longer lets the request through (the library's
// documented fail-open), here after a second rather than the default five.
const ratelimit = new Ratelimit({ redis, limiter, prefix: 'ratelab', timeout: Number(process.env.TIMEOUT_MS) });

const server = http.createServer(async (req, res) => {
  try {
    const r = await ratelimit.limit(req.headers['x-key'] ?? 'anonymous');
    await r.pending;
    res.writeHead(r.success ? 200 : 429, {
      'X-RateLimit-Limit': r.limit,
      'X-RateLimit-Remaining': r.remaining,
      'X-RateLimit-Reset': r.reset,
    });
    res.end(r.success ? 'ok\n' : 'Too Many Requests\n');
  } catch (e) {
    res.writeHead(500);
    res.end(`${e.message}\n`);
  }
});
client.once('ready', () => server.listen(Number(process.env.PORT), '127.0.0.1'));
