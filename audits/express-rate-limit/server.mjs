// express-rate-limit on one Express route, as its README configures it, counting in Redis
// through rate-limit-redis (STORE=redis) or in each process's memory (STORE=memory).
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { RedisStore } from 'rate-limit-redis'
import { createClient } from 'redis'

let store
if (process.env.STORE === 'redis') {
	// COMMAND_TIMEOUT_MS (a variant): every command fails after it (node-redis 5 sets none).
	const timeout = process.env.COMMAND_TIMEOUT_MS
	const client = createClient({
		url: process.env.REDIS_URL,
		...(timeout && { commandOptions: { timeout: Number(timeout) } }),
	})
	// node-redis reconnects on its own; an error event nobody listens to ends the process.
	client.on('error', (err) => console.error('redis:', err.message))
	await client.connect()
	store = new RedisStore({
		sendCommand: (...args) => client.sendCommand(args),
	})
}

const app = express()
app.use(
	rateLimit({
		windowMs: Number(process.env.WINDOW_MS),
		limit: Number(process.env.LIMIT),
		standardHeaders: process.env.HEADERS,
		legacyHeaders: false,
		keyGenerator: (req) => req.get('x-key'),
		store,
	}),
)
app.get('/', (req, res) => res.send('ok\n'))
app.listen(Number(process.env.PORT), '127.0.0.1')
