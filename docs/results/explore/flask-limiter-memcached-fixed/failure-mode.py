#!/usr/bin/env python3
"""Reproduces a finding of `ratelab audit --explore` on flask-limiter/memcached-fixed (claimed policy first-hit:10,1s):

    failure-mode: declared fail-closed, but 21 requests in flight while the store was down got no answer until it was back (requests [18, 19, 20, 21, 22, 23, 24, 25])

Start the target, then: python3 {this file} [URL ...] [--store-pid PID] [--restart CMD]
[--redis-port PORT], one URL per instance ({key} where the key goes in the path), the
store's pid to freeze or kill it, the command that starts it again, its Redis port to
pause it. Python's standard library only. Exit 1: reproduced (a violation of the
finding's kind); 0: not this time.
In ratelab: ratelab audit --explore flask-limiter/memcached-fixed --replay docs/results/explore/flask-limiter-memcached-fixed/failure-mode.json
"""
import email.utils, os, re, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

URLS = ["http://127.0.0.1:45733/", "http://127.0.0.1:40251/"]
KEY_HEADER = "x-key"
DENY = (429,)
ALIGN_MS = 1000
CLOCK_RES_MS = 1000
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
# their planned times or up to each slack later (ratelab's specification of first-hit:10,1s, the
# extremes over the timings it tried), for the keys the finding names: all of them
# (LEAST, MOST), and those planned before the first fault (LEAST_BEFORE_FAULT,
# MOST_BEFORE_FAULT, used when the script applies one).
LEAST = {1: [42, 42, 42, 42]}
MOST = {1: [50, 50, 51, 58]}
LEAST_BEFORE_FAULT = {1: [8, 8, 8, 8]}
MOST_BEFORE_FAULT = {1: [8, 8, 8, 8]}
# From any state, at most BURST + AMOUNT * span / PERIOD_MS admitted in any span (ms).
BURST, AMOUNT, PERIOD_MS = 20, 10, 1000
# Whether the claim is a token bucket, whose remaining count grows at its refill rate.
BUCKET = False
# The most room the claimed policy reports left after each of a key's requests, in
# planned order, at the timings tried, per slack (used when no fault runs).
MOST_LEFT = {1: [[9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 9, 8, 9, 8, 9, 8, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 9, 9, 9, 9, 8, 9, 9, 8, 7, 6, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 8, 9, 9, 9, 9, 9, 9, 8, 7, 6, 9, 8, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 9, 9, 9, 9, 9, 8, 9, 9, 8, 7, 9, 9], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 9, 8, 9, 9, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 9, 8, 9, 9, 9, 9, 8, 9, 9, 8, 9, 8, 7, 6, 5, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 8, 9, 9, 9, 9, 9, 8, 9, 8, 7, 9, 9, 9, 8, 7, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 9, 9, 8, 9, 9, 9, 9, 9, 8, 7, 9, 8, 7, 6, 9, 9], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 9, 9, 9, 8, 7, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 9, 9, 9, 8, 7, 6, 9, 9, 8, 7, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 8, 7, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 8, 7, 6, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 9, 9, 9, 9, 9, 8, 7, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 8, 7, 6, 9, 9, 9, 9, 8, 9, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 5, 9, 9, 8, 7, 6, 9, 8, 9, 8, 7, 9, 9, 8, 7, 6, 9, 8, 7, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 9, 8, 7, 9, 9, 9, 9, 8, 9, 9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 6, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 9, 8, 7, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 8, 9, 8, 9, 9, 9, 9]]}


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


def remaining(headers):
    # X-RateLimit-Remaining, RateLimit-Remaining, or the RateLimit field's r= (remaining=).
    for name in ("X-RateLimit-Remaining", "RateLimit-Remaining"):
        value = (headers.get(name) or "").strip()
        if value.isdigit():
            return int(value)
    found = re.search(r"(?:^|[;,\s])(?:r|remaining)=(\d+)", headers.get("RateLimit") or "")
    return int(found.group(1)) if found else None


def reset(headers):
    # Seconds until the window resets: RateLimit-Reset, or the RateLimit field's t=.
    value = (headers.get("RateLimit-Reset") or "").strip()
    if value.isdigit():
        return int(value)
    found = re.search(r"(?:^|[;,\s])(?:t|reset)=(\d+)", headers.get("RateLimit") or "")
    return int(found.group(1)) if found else None


def send(url, key):
    req = urllib.request.Request(url.replace("{key}", key))
    if KEY_HEADER:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("Retry-After"), remaining(r.headers), reset(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After"), remaining(e.headers), reset(e.headers)
    except OSError as e:
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
    print("skipped: %s for %d ms (say how: --store-pid, --restart, --redis-port)" % (kind, ms))
    return False


def main():
    urls, opts = options(sys.argv[1:])
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
    # (began, ended, whether the store was down): a pause only slows its answers.
    applied = []
    for at, kind, ms in FAULTS:
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        began = (time.monotonic() - start) * 1000
        if fault(kind, ms, opts):
            applied.append((began, (time.monotonic() - start) * 1000, kind != "slow"))
    for t in threads:
        t.join()
    # The kinds of violation seen, as ratelab names its checks.
    found = set()
    # Held: requests in flight when the store went down and answered once it was back, and
    # those sent in the first half of its spell, when none of these was answered before.
    for began, ended, down in applied:
        if not down:
            continue
        early = [s for s in seen if s and began <= s[1] < (began + ended) / 2]
        waited = [s for s in seen if s and s[1] < began and s[2] > ended]
        if (early or waited) and all(s[2] > ended for s in early):
            found.add("failure-mode")
            print("held: %d requests got no answer until the store was back, %.0f ms after it went down" % (len(early) + len(waited), ended - began))
    for s in seen:
        if s and not retry_after_ok(s[4]):
            found.add("fields")
            print("key %d: Retry-After %r is neither delay-seconds nor an HTTP-date" % (s[0], s[4]))
            break
    # The remaining count: a denial that says there is room for it, and (for a bucket) a
    # count that grows faster than the refill between an answer and a later request's.
    for s in seen:
        if s and s[3] in DENY and s[6] is not None and s[6] >= 1:
            found.add("fields")
            print("key %d: denied, while saying %d remaining" % (s[0], s[6]))
            break
    for s in seen:
        if s and s[3] in DENY and s[7] is not None and s[4] is not None and s[4].strip().isdigit() and int(s[4]) < s[7]:
            found.add("fields")
            print("key %d: denied with Retry-After %s, earlier than the reset the RateLimit fields give, %d s" % (s[0], s[4].strip(), s[7]))
            break
    if BUCKET:
        told = sorted((s for s in seen if s and s[6] is not None), key=lambda s: s[1])
        for j, b in enumerate(told):
            grew = [a for a in told[:j] if a[0] == b[0] and a[2] < b[1]
                    and (b[6] - a[6] - 1) * PERIOD_MS >= AMOUNT * (b[2] - a[1] + CLOCK_RES_MS)]
            if grew:
                found.add("fields")
                a = grew[-1]
                print("key %d: remaining went from %d to %d within %.1f ms, faster than the refill" % (b[0], a[6], b[6], b[2] - a[1] + CLOCK_RES_MS))
                break
    # A bucket's denial tells the true wait rounded up: never 0.
    for s in seen if BUCKET else []:
        if s and s[3] in DENY and s[4] is not None and s[4].strip() == "0":
            found.add("linearizable")
            print("key %d: denied, and told to retry after 0 seconds" % s[0])
            break
    # Without faults, the remaining counts a key's answers gave against the most the policy
    # leaves after its i-th request: whatever order they were decided in, the k-th largest
    # said at most the k-th largest allowed, where every one went out and came back on time.
    def within(reqs):
        # The tightest slack within which every one of reqs was sent and answered after its
        # planned time, so decided where the specification was asked; None if none is.
        if any(s[1] < s[5] for s in reqs):
            return None
        worst = max((s[2] - s[5] for s in reqs), default=0)
        return next((i for i, ms in enumerate(SLACKS_MS) if worst <= ms), None)
    decided = lambda s: isinstance(s[3], int) and (s[3] in DENY or 200 <= s[3] < 400)
    for key in sorted(MOST_LEFT) if not applied else []:
        mine = [s for s in seen if s and s[0] == key]
        i = within(mine)
        if i is not None and len(mine) == len(MOST_LEFT[key][i]) and all(decided(s) for s in mine):
            said = sorted((s[6] for s in mine if s[6] is not None), reverse=True)
            allowed = sorted(MOST_LEFT[key][i], reverse=True)
            over = [(k, r, m) for k, (r, m) in enumerate(zip(said, allowed)) if r > m]
            if over:
                found.add("linearizable")
                k, r, m = over[0]
                print("key %d: its answers said %s remaining, where the policy leaves at most %s, each decided within %d ms of its planned time (the %d-th largest: %d > %d)" % (key, said, allowed[:len(said)], SLACKS_MS[i], k + 1, r, m))
    # Answers a fault touched (in flight from its start until the recovery after it) are held
    # to no policy; the others are, in segments between the faults.
    zones = [(began, ended + RECOVERY_MS) for began, ended, _ in applied]
    def segment(s):
        if any(s[1] <= end and s[2] >= begin for begin, end in zones):
            return None
        return sum(1 for _, end in zones if end < s[1])
    most = MOST_BEFORE_FAULT if applied else MOST
    least = LEAST_BEFORE_FAULT if applied else LEAST
    for key in sorted(most):
        mine = [s for s in seen if s and s[0] == key and segment(s) is not None]
        admitted = [s for s in mine if decided(s) and s[3] not in DENY]
        denied = sum(1 for s in mine if s[3] in DENY)
        print("key %d: %d requests, %d admitted, %d denied, %d without a decision" % (key, len(mine), len(admitted), denied, len(mine) - len(admitted) - denied))
        first = [s for s in admitted if segment(s) == 0]
        # The count holds at the tightest slack within which every request it counts was sent
        # and answered: for the most, those before the first fault's zone; for the fewest,
        # every one planned before the first fault, each with a decision.
        i = within([s for s in mine if segment(s) == 0])
        counted = [s for s in seen if s and s[0] == key and (not applied or s[5] < FAULTS[0][0])]
        j = within(counted) if all(segment(s) == 0 and decided(s) for s in counted) else None
        if i is None:
            print("  count: inconclusive, requests answered more than %d ms after their planned times" % SLACKS_MS[-1])
        elif len(first) > most[key][i]:
            found.add("linearizable")
            print("  count: %d admitted, where the policy admits at most %d of these requests, each decided within %d ms of its planned time" % (len(first), most[key][i], SLACKS_MS[i]))
        elif j is not None and len(first) < least[key][j]:
            found.add("linearizable")
            print("  count: %d admitted, where the policy admits at least %d of these requests, each decided within %d ms of its planned time" % (len(first), least[key][j], SLACKS_MS[j]))
        for part in sorted(set(segment(s) for s in admitted)):
            run = sorted((s for s in admitted if segment(s) == part), key=lambda s: s[1])
            for i in range(len(run)):
                last = 0
                for j in range(i, len(run)):
                    last = max(last, run[j][2])
                    span = last - run[i][1] + CLOCK_RES_MS
                    if j - i + 1 > BURST + AMOUNT * span / PERIOD_MS:
                        found.add("envelope")
                        print("  envelope: %d admitted within %.1f ms (sent at %.1f ms on), where at most %d may be" % (j - i + 1, span, run[i][1], BURST + AMOUNT * span / PERIOD_MS))
                        break
                else:
                    continue
                break
    # Reproduced: a violation of the kind the finding is; others are printed, not counted.
    others = ", ".join(sorted(found - {CHECK}))
    print("reproduced" if CHECK in found else "not reproduced this time")
    if others:
        print("also seen: %s" % others)
    sys.exit(1 if CHECK in found else 0)


if __name__ == "__main__":
    main()
