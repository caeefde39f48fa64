"""Requests in flight when Redis is killed, answered only once a new Redis is up, by hand.

Start Redis with a pidfile and an instance (server.js) on it, then:
python3 held-across-restart.py URL REDIS_PIDFILE REDIS_PORT TRIALS. Each trial sends 200
requests a millisecond apart; after the 100th it freezes Redis for 50 ms (so some are
surely in flight), kills it, waits 700 ms and starts an empty one on the same port, then
counts the requests sent before the kill and answered after the restart.
"""
import os, signal, subprocess, sys, threading, time, urllib.error, urllib.request

URL, PIDFILE, PORT, TRIALS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def send(key, out):
    sent = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(URL, headers={"x-key": key}), timeout=10) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except Exception as e:
        status = str(e)
    out.append((sent, time.monotonic(), status))


held = 0
for trial in range(TRIALS):
    out = []
    threads = [threading.Thread(target=send, args=("k%d-%d" % (trial, i % 50), out)) for i in range(200)]
    for i, t in enumerate(threads):
        t.start()
        if i == 100:
            pid = int(open(PIDFILE).read())
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.05)
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.7)
            subprocess.run(["redis-server", "--port", PORT, "--save", "", "--appendonly", "no",
                            "--daemonize", "yes", "--pidfile", PIDFILE, "--loglevel", "warning"])
            back = time.monotonic()
        time.sleep(0.001)
    for t in threads:
        t.join()
    late = [o for o in out if o[0] < killed and o[1] > back]
    print("trial %d: %d requests sent before the kill answered after the restart (statuses %s)"
          % (trial, len(late), sorted(set(o[2] for o in late))))
    held += bool(late)
    time.sleep(1.5)
print("%d of %d trials held a request across the restart" % (held, TRIALS))
