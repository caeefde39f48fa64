#!/usr/bin/env python3
"""Reproduces a finding of `ratelab audit --explore` on flask-limiter/redis-moving (claimed policy sliding-log:10,1s):

    failure-mode: declared fail-closed, but 21 requests in flight while the store was down got no answer until it was back (requests [18, 19, 20, 21, 22, 23, 24, 25])

Start the target, then: python3 {this file} [URL ...] [--store-pid PID] [--restart CMD]
[--redis-port PORT], one URL per instance ({key} where the key goes in the path), the
store's pid to freeze or kill it, the command that starts it again, its Redis port to
pause it. Python's standard library only. Exit 1: reproduced (a violation of the
finding's kind); 0: not this time.
In ratelab: ratelab audit --explore flask-limiter/redis-moving --replay docs/results/explore/flask-limiter-redis-moving/failure-mode.json
"""
import email.utils, os, re, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

URLS = ["http://127.0.0.1:34753/", "http://127.0.0.1:33211/"]
KEY_HEADER = "x-key"
DENY = (429,)
ALIGN_MS = 1000
CLOCK_RES_MS = 2
RECOVERY_MS = 1000
# How late (ms) a request may be sent and answered after its planned time, for the
# counts below: each holds one value per slack.
SLACKS_MS = [20, 100, 300, 1000]
# The check whose violation this reproduces (others are printed, not counted).
CHECK = "failure-mode"
# (ms after the start, key, instance)
REQUESTS = [
    (1126.132, 1, 0),
    (1151.132, 1, 0),
    (1176.132, 1, 0),
    (1201.132, 1, 0),
    (1226.132, 1, 0),
    (1251.132, 1, 0),
    (1276.132, 1, 0),
    (1301.132, 1, 0),
    (1326.132, 1, 0),
    (1351.132, 1, 0),
    (1376.132, 1, 0),
    (1401.132, 1, 0),
    (1426.132, 1, 0),
    (1451.132, 1, 0),
    (1476.132, 1, 0),
    (1501.132, 1, 0),
    (1526.132, 1, 0),
    (1551.132, 1, 0),
    (1576.132, 1, 0),
    (1601.132, 1, 0),
    (1626.132, 1, 0),
    (1651.132, 1, 0),
    (1676.132, 1, 0),
    (1701.132, 1, 0),
    (1726.132, 1, 0),
    (1751.132, 1, 0),
    (1776.132, 1, 0),
    (1801.132, 1, 0),
    (1826.132, 1, 0),
    (1851.132, 1, 0),
    (1876.132, 1, 0),
    (1901.132, 1, 0),
    (1926.132, 1, 0),
    (1951.132, 1, 0),
    (1976.132, 1, 0),
    (2001.132, 1, 0),
    (2026.132, 1, 0),
    (2051.132, 1, 0),
    (2076.132, 1, 0),
    (2101.132, 1, 0),
    (2126.132, 1, 0),
    (2151.132, 1, 0),
    (2176.132, 1, 0),
    (2201.132, 1, 0),
    (2226.132, 1, 0),
    (2251.132, 1, 0),
    (2276.132, 1, 0),
    (2301.132, 1, 0),
    (2326.132, 1, 0),
    (2351.132, 1, 0),
    (2376.132, 1, 0),
    (2401.132, 1, 0),
    (2426.132, 1, 0),
    (2451.132, 1, 0),
    (2476.132, 1, 0),
    (2501.132, 1, 0),
    (2526.132, 1, 0),
    (2551.132, 1, 0),
    (2576.132, 1, 0),
    (2601.132, 1, 0),
    (2626.132, 1, 0),
    (2651.132, 1, 0),
    (2676.132, 1, 0),
    (2701.132, 1, 0),
    (2726.132, 1, 0),
    (2751.132, 1, 0),
    (2776.132, 1, 0),
    (2801.132, 1, 0),
    (2826.132, 1, 0),
    (2851.132, 1, 0),
    (2876.132, 1, 0),
    (2901.132, 1, 0),
    (2926.132, 1, 0),
    (2951.132, 1, 0),
    (2976.132, 1, 0),
    (3001.132, 1, 0),
    (3026.132, 1, 0),
    (3051.132, 1, 0),
    (3076.132, 1, 0),
    (3101.132, 1, 0),
    (3126.132, 1, 0),
    (3151.132, 1, 0),
    (3176.132, 1, 0),
    (3201.132, 1, 0),
    (3226.132, 1, 0),
    (3251.132, 1, 0),
    (3276.132, 1, 0),
    (3301.132, 1, 0),
    (3326.132, 1, 0),
    (3351.132, 1, 0),
    (3376.132, 1, 0),
    (3401.132, 1, 0),
    (3426.132, 1, 0),
    (3451.132, 1, 0),
    (3476.132, 1, 0),
    (3501.132, 1, 0),
    (3526.132, 1, 0),
    (3551.132, 1, 0),
    (3576.132, 1, 0),
    (3601.132, 1, 0),
    (3626.132, 1, 0),
    (3651.132, 1, 0),
    (3676.132, 1, 0),
    (3701.132, 1, 0),
    (3726.132, 1, 0),
    (3751.132, 1, 0),
    (3776.132, 1, 0),
    (3801.132, 1, 0),
    (3826.132, 1, 0),
    (3851.132, 1, 0),
    (3876.132, 1, 0),
    (3901.132, 1, 0),
    (3926.132, 1, 0),
    (3951.132, 1, 0),
    (3976.132, 1, 0),
    (4001.132, 1, 0),
    (4026.132, 1, 0),
    (4051.132, 1, 0),
    (4076.132, 1, 0),
    (4101.132, 1, 0),
    (4126.132, 1, 0),
    (4151.132, 1, 0),
    (4176.132, 1, 0),
    (4201.132, 1, 0),
    (4226.132, 1, 0),
    (4251.132, 1, 0),
    (4276.132, 1, 0),
    (4301.132, 1, 0),
    (4326.132, 1, 0),
    (4351.132, 1, 0),
    (4376.132, 1, 0),
    (4401.132, 1, 0),
    (4426.132, 1, 0),
    (4451.132, 1, 0),
    (4476.132, 1, 0),
    (4501.132, 1, 0),
    (4526.132, 1, 0),
    (4551.132, 1, 0),
    (4576.132, 1, 0),
    (4601.132, 1, 0),
    (4626.132, 1, 0),
    (4651.132, 1, 0),
    (4676.132, 1, 0),
    (4701.132, 1, 0),
    (4726.132, 1, 0),
    (4751.132, 1, 0),
    (4776.132, 1, 0),
    (4801.132, 1, 0),
    (4826.132, 1, 0),
    (4851.132, 1, 0),
    (4876.132, 1, 0),
    (4901.132, 1, 0),
    (4926.132, 1, 0),
    (4951.132, 1, 0),
    (4976.132, 1, 0),
    (5001.132, 1, 0),
    (5026.132, 1, 0),
    (5051.132, 1, 0),
    (5076.132, 1, 0),
    (5101.132, 1, 0),
    (5126.132, 1, 0),
    (5151.132, 1, 0),
]
# (ms after the start, fault, lasting ms)
FAULTS = [
    (1326.132, "freeze", 826.555),
]
# The fewest and the most the claimed policy admits of each key's requests, decided at
# their planned times or up to each slack later (ratelab's specification of sliding-log:10,1s, the
# extremes over the timings it tried), for the keys the finding names: all of them
# (LEAST, MOST), and those planned before the first fault (LEAST_BEFORE_FAULT,
# MOST_BEFORE_FAULT, used when the script applies one).
LEAST = {1: [40, 40, 40, 41]}
MOST = {1: [42, 42, 44, 50]}
LEAST_BEFORE_FAULT = {1: [8, 8, 8, 8]}
MOST_BEFORE_FAULT = {1: [8, 8, 8, 8]}
# From any state, at most BURST + AMOUNT * span / PERIOD_MS admitted in any span (ms).
BURST, AMOUNT, PERIOD_MS = 10, 10, 1000
# Whether the claim is a token bucket, whose remaining count grows at its refill rate.
BUCKET = False
# The most room the claimed policy reports left after each of a key's requests, in
# planned order, at the timings tried, per slack (used when no fault runs).
MOST_LEFT = {1: [[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 3, 2, 3, 4, 3, 3, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 2, 2, 2, 2, 3, 3, 3, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 2, 1, 1, 2, 3, 3, 3, 2, 1, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 1, 1, 3, 4, 4, 4, 4, 4, 5, 4, 3, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 1, 1, 1, 3, 3, 4, 3, 3, 2, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 2, 1, 2, 3, 4, 6, 5, 4, 4, 3, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 2, 1, 0, 1, 1, 0, 7, 6, 5, 4, 3, 2, 3, 3, 4, 3, 3, 2, 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 2, 2, 2, 1, 0, 2, 2, 3, 2, 3, 2, 1, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 2, 1, 0, 0, 2, 2, 1, 0, 0, 3, 4, 3, 2, 1, 2, 1, 3, 2, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 4, 4, 4, 5, 5, 6]]}


def options(argv):
    urls, opts, i = [], {}, 0
    while i < len(argv):
        if argv[i] in ("--store-pid", "--restart", "--redis-port"):
            if i + 1 == len(argv):
                sys.exit("%s needs a value" % argv[i])
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            urls.append(argv[i])
            i += 1
    return urls or URLS, opts


def fields(headers):
    # (remaining, seconds to reset) as ratelab reads them: the RateLimit field's item with
    # the least r (its t beside it), else RateLimit-Remaining / -Reset, else
    # X-RateLimit-Remaining.
    items = []
    for item in (headers.get("RateLimit") or "").split(","):
        r = re.search(r"(?:^|[;\s])(?:r|remaining)=(\d+)", item)
        t = re.search(r"(?:^|[;\s])(?:t|reset)=(\d+)", item)
        if r:
            items.append((int(r.group(1)), int(t.group(1)) if t else None))
    if items:
        return min(items, key=lambda i: i[0])
    for name in ("RateLimit-Remaining", "X-RateLimit-Remaining"):
        value = (headers.get(name) or "").strip()
        if value.isdigit():
            reset = (headers.get("RateLimit-Reset") or "").strip()
            return int(value), int(reset) if reset.isdigit() else None
    return None, None


def send(url, key):
    req = urllib.request.Request(url.replace("{key}", key))
    if KEY_HEADER:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return (r.status, r.headers.get("Retry-After")) + fields(r.headers)
    except urllib.error.HTTPError as e:
        return (e.code, e.headers.get("Retry-After")) + fields(e.headers)
    except Exception as e:
        return "no answer: %s" % e, None, None, None


def retry_after_ok(value):
    # RFC 9110: delay-seconds (digits) or an HTTP-date.
    if value is None or value.isdigit():
        return True
    try:
        return email.utils.parsedate_to_datetime(value) is not None
    except (TypeError, ValueError):
        return False


def fault(kind, ms, opts):
    pid = int(opts.get("--store-pid", 0))
    try:
        if kind == "freeze" and pid:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(ms / 1000)
            os.kill(pid, signal.SIGCONT)
            return True
        if kind == "restart" and pid and "--restart" in opts:
            os.kill(pid, signal.SIGKILL)
            time.sleep(ms / 1000)
            # The store started again is the one a later fault acts on.
            opts["--store-pid"] = str(subprocess.Popen(shlex.split(opts["--restart"])).pid)
            return True
        if kind == "slow" and "--redis-port" in opts:
            with socket.create_connection(("127.0.0.1", int(opts["--redis-port"]))) as s:
                n = str(int(ms))
                s.sendall(b"*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$%d\r\n%s\r\n$3\r\nALL\r\n" % (len(n), n.encode()))
                s.recv(64)
            time.sleep(ms / 1000)
            return True
    except OSError as e:
        print("skipped: %s for %d ms (%s)" % (kind, ms, e))
        return False
    print("skipped: %s for %d ms (say how: --store-pid, --restart, --redis-port)" % (kind, ms))
    return False


def run(urls, opts):
    # Sends the schedule and applies its faults: each request's (key, sent, answered,
    # status, Retry-After, planned, remaining, reset), ms after the start, and each fault
    # applied as (its index in FAULTS, began, ended, whether the store was down).
    prefix = "repro-%d-%d" % (os.getpid(), time.time())
    wait = ALIGN_MS - (time.time() * 1000) % ALIGN_MS
    if wait < 10000:
        time.sleep(wait / 1000)
    start = time.monotonic()
    seen = [None] * len(REQUESTS)

    def request(i, at, key, instance):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        sent = time.monotonic() - start
        status, retry_after, left, t = send(urls[instance % len(urls)], "%s-k%d" % (prefix, key))
        seen[i] = (key, sent * 1000, (time.monotonic() - start) * 1000, status, retry_after, at, left, t)

    threads = [threading.Thread(target=request, args=(i,) + r) for i, r in enumerate(REQUESTS)]
    for t in threads:
        t.start()
    applied = []
    for n, (at, kind, ms) in enumerate(FAULTS):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        began = (time.monotonic() - start) * 1000
        if fault(kind, ms, opts):
            # A pause only slows the store's answers; the others take it down.
            applied.append((n, began, (time.monotonic() - start) * 1000, kind != "slow"))
    for t in threads:
        t.join()
    return seen, applied


def decided(s):
    return isinstance(s[3], int) and (s[3] in DENY or 200 <= s[3] < 400)


def within(reqs):
    # The tightest slack within which every one of reqs was sent and answered after its
    # planned time, so decided where the specification was asked; None if none is.
    # (A request is sent on its planned time but for the clock's rounding: 1 ms of it.)
    if any(s is None or s[1] < s[5] - 1 for s in reqs):
        return None
    worst = max((s[2] - s[5] for s in reqs), default=0)
    return next((i for i, ms in enumerate(SLACKS_MS) if worst <= ms), None)


def check_held(seen, applied, found):
    # Requests in flight when the store went down and answered once it was back, and those
    # sent in the first half of its spell, when none of these was answered before.
    for _, began, ended, down in applied:
        if not down:
            continue
        early = [s for s in seen if s and began <= s[1] < (began + ended) / 2]
        waited = [s for s in seen if s and s[1] < began and s[2] > ended]
        if (early or waited) and all(s[2] > ended for s in early):
            found.add("failure-mode")
            print("held: %d requests got no answer until the store was back, %.0f ms after it went down" % (len(early) + len(waited), ended - began))


def check_fields(seen, segment, found):
    # The answers' fields, where no fault touched them; counts compared within a segment.
    judged = [s for s in seen if s and segment(s) is not None]
    for s in judged:
        if not retry_after_ok(s[4]):
            found.add("fields")
            print("key %d: Retry-After %r is neither delay-seconds nor an HTTP-date" % (s[0], s[4]))
            break
    for s in judged:
        if s[3] in DENY and s[6] is not None and s[6] >= 1:
            found.add("fields")
            print("key %d: denied, while saying %d remaining" % (s[0], s[6]))
            break
    for s in judged:
        if s[3] in DENY and s[7] is not None and s[4] is not None and s[4].strip().isdigit() and int(s[4]) < s[7]:
            found.add("fields")
            print("key %d: denied with Retry-After %s, earlier than the reset the RateLimit fields give, %d s" % (s[0], s[4].strip(), s[7]))
            break
    if BUCKET:
        told = sorted((s for s in judged if s[6] is not None), key=lambda s: s[1])
        for j, b in enumerate(told):
            grew = [a for a in told[:j] if a[0] == b[0] and segment(a) == segment(b) and a[2] < b[1]
                    and (b[6] - a[6] - 1) * PERIOD_MS >= AMOUNT * (b[2] - a[1] + CLOCK_RES_MS)]
            if grew:
                found.add("fields")
                a = grew[-1]
                print("key %d: remaining went from %d to %d within %.1f ms, faster than the refill" % (b[0], a[6], b[6], b[2] - a[1] + CLOCK_RES_MS))
                break
        # A bucket's denial tells the true wait rounded up: never 0.
        for s in judged:
            if s[3] in DENY and s[4] is not None and s[4].strip() == "0":
                found.add("linearizable")
                print("key %d: denied, and told to retry after 0 seconds" % s[0])
                break


def check_left(seen, found):
    # Without faults, the remaining counts a key's answers gave against the most the policy
    # leaves after its i-th request: whatever order they were decided in, the k-th largest
    # said at most the k-th largest allowed, at the slack every one was answered within.
    for key in sorted(MOST_LEFT):
        mine = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key]
        i = within(mine)
        if i is None or not all(decided(s) for s in mine):
            continue
        said = sorted((s[6] for s in mine if s[6] is not None), reverse=True)
        allowed = sorted(MOST_LEFT[key][i], reverse=True)
        over = [(k, r, m) for k, (r, m) in enumerate(zip(said, allowed)) if r > m]
        if over:
            found.add("linearizable")
            k, r, m = over[0]
            print("key %d: its answers said %s remaining, where the policy leaves at most %s, each decided within %d ms of its planned time (the %d-th largest: %d > %d)" % (key, said, allowed[:len(said)], SLACKS_MS[i], k + 1, r, m))


def check_counts(seen, applied, segment, found):
    # Before the first fault (or in the whole run without one): each key's admissions no
    # more and no fewer than the policy admits, at the tightest slack its requests were
    # sent and answered within. Then the envelope, in each segment between the faults.
    if applied and applied[0][0] != 0:
        print("count: inconclusive, the schedule's first fault was not applied")
    most = MOST_BEFORE_FAULT if applied else MOST
    least = LEAST_BEFORE_FAULT if applied else LEAST
    before = lambda r: not applied or r[0] < FAULTS[0][0]
    for key in sorted(most):
        mine = [s for s in seen if s and s[0] == key and segment(s) is not None]
        admitted = [s for s in mine if decided(s) and s[3] not in DENY]
        denied = sum(1 for s in mine if s[3] in DENY)
        print("key %d: %d requests, %d admitted, %d denied, %d without a decision" % (key, len(mine), len(admitted), denied, len(mine) - len(admitted) - denied))
        if not applied or applied[0][0] == 0:
            # Every request planned before the first fault, each answered in segment 0.
            counted = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key and before(r)]
            first = [s for s in counted if s and segment(s) == 0 and decided(s) and s[3] not in DENY]
            i = within([s for s in counted if s and segment(s) == 0])
            whole = all(s and segment(s) == 0 and decided(s) for s in counted)
            j = within(counted) if whole else None
            if i is None:
                print("  count: inconclusive, requests answered more than %d ms after their planned times" % SLACKS_MS[-1])
            elif len(first) > most[key][i]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at most %d of these requests, each decided within %d ms of its planned time" % (len(first), most[key][i], SLACKS_MS[i]))
            elif j is not None and len(first) < least[key][j]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at least %d of these requests, each decided within %d ms of its planned time" % (len(first), least[key][j], SLACKS_MS[j]))
        for part in sorted(set(segment(s) for s in admitted)):
            spell = sorted((s for s in admitted if segment(s) == part), key=lambda s: s[1])
            for i in range(len(spell)):
                last = 0
                for j in range(i, len(spell)):
                    last = max(last, spell[j][2])
                    span = last - spell[i][1] + CLOCK_RES_MS
                    if j - i + 1 > BURST + AMOUNT * span / PERIOD_MS:
                        found.add("envelope")
                        print("  envelope: %d admitted within %.1f ms (sent at %.1f ms on), where at most %d may be" % (j - i + 1, span, spell[i][1], BURST + AMOUNT * span / PERIOD_MS))
                        break
                else:
                    continue
                break


def main():
    urls, opts = options(sys.argv[1:])
    seen, applied = run(urls, opts)
    # Answers a fault touched (in flight from its start until the recovery after it) are held
    # to no policy; the others are, in segments between the faults.
    zones = [(began, ended + RECOVERY_MS) for _, began, ended, _ in applied]

    def segment(s):
        if any(s[1] <= end and s[2] >= begin for begin, end in zones):
            return None
        return sum(1 for _, end in zones if end < s[1])

    # The kinds of violation seen, as ratelab names its checks.
    found = set()
    check_held(seen, applied, found)
    check_fields(seen, segment, found)
    if not applied:
        check_left(seen, found)
    check_counts(seen, applied, segment, found)
    # Reproduced: a violation of the kind the finding is; others are printed, not counted.
    others = ", ".join(sorted(found - {CHECK}))
    print("reproduced" if CHECK in found else "not reproduced this time")
    if others:
        print("also seen: %s" % others)
    sys.exit(1 if CHECK in found else 0)


if __name__ == "__main__":
    main()
