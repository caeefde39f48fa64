"""A denial whose X-RateLimit-Remaining says there is room, by hand, without ratelab.

Start an instance (app.py, a limit of 10/second), then: python3 remaining-race.py TRIALS URL.
Each trial spends a fresh key's 10, then sends requests one after another from 30 ms before
the moment its first hit leaves the window to 30 ms after, and looks for a 429 that says
at least 1 remaining.
"""
import sys, time, urllib.error, urllib.request

TRIALS, URL = int(sys.argv[1]), sys.argv[2]


def send(key):
    req = urllib.request.Request(URL, headers={"x-key": key})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("X-RateLimit-Remaining")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-RateLimit-Remaining")


seen = 0
for trial in range(TRIALS):
    key = "race-%d-%d" % (trial, time.time())
    first = time.monotonic()
    for _ in range(10):
        send(key)
    while time.monotonic() < first + 0.97:
        time.sleep(0.001)
    while time.monotonic() < first + 1.03:
        status, left = send(key)
        if status == 429 and left is not None and int(left) >= 1:
            seen += 1
            print("trial %d: 429 with X-RateLimit-Remaining: %s" % (trial, left))
            break
print("%d of %d trials: a denial that says there is room" % (seen, TRIALS))
