// node-redis's command timeout against a frozen Redis, without ratelab or Express:
// node timeout-after-write.mjs REDIS_URL REDIS_PID. It freezes Redis (SIGSTOP) for 1.5 s and
// sends PING with `commandOptions.timeout` of 100 ms: the reply comes when Redis thaws,
// not an error after 100 ms, because the timeout ends once the command is written.
import { createClient } from 'redis'

const [url, pid] = process.argv.slice(2)
const client = createClient({ url, commandOptions: { timeout: 100 } })
client.on('error', (err) => console.error('redis:', err.message))
await client.connect()
process.kill(Number(pid), 'SIGSTOP')
const thaw = setTimeout(() => process.kill(Number(pid), 'SIGCONT'), 1500)
const sent = Date.now()
const outcome = await client.sendCommand(['PING']).then(
	(reply) => `reply ${reply}`,
	(err) => `error ${err.message}`,
)
console.log(`${outcome} after ${Date.now() - sent} ms (timeout 100 ms, Redis frozen 1500 ms)`)
clearTimeout(thaw)
process.kill(Number(pid), 'SIGCONT')
await client.quit()
