#!/usr/bin/env python3
"""Reproduces a finding of `ratelab audit --explore` on express-rate-limit/memory (claimed policy first-hit:10,1s):

    envelope: key \"ratelab-probe-12737-af5761b4dd8f-s10-k0@0\": 38 admitted in [65541326ns, 1500402584ns] against a bound of 34 (excess 4; requests [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 21, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52])

Start the target, then: python3 {this file} [URL ...] [--store-pid PID] [--restart CMD]
[--redis-port PORT], one URL per instance ({key} where the key goes in the path), the
store's pid to freeze or kill it, the command that starts it again, its Redis port to
pause it. Python's standard library only. Exit 1: reproduced; 0: not this time.
In ratelab: ratelab audit --explore express-rate-limit/memory --replay docs/results/explore/express-rate-limit-memory/envelope.json
"""
import email.utils, os, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

URLS = ["http://127.0.0.1:42363/", "http://127.0.0.1:43897/"]
KEY_HEADER = "x-key"
DENY = (429,)
ALIGN_MS = 1000
CLOCK_RES_MS = 2
RECOVERY_MS = 1000
SLACK_MS = 20
# (ms after the start, key, instance)
REQUESTS = [
    (66.482, 0, 0),
    (91.173, 0, 1),
    (115.864, 0, 0),
    (140.555, 0, 1),
    (165.246, 0, 0),
    (189.937, 0, 0),
    (214.628, 0, 1),
    (239.319, 0, 1),
    (264.010, 0, 0),
    (288.701, 0, 0),
    (313.392, 0, 0),
    (338.083, 0, 0),
    (362.774, 0, 0),
    (387.465, 0, 1),
    (412.156, 0, 0),
    (436.847, 0, 1),
    (461.538, 0, 1),
    (486.229, 0, 1),
    (510.920, 0, 1),
    (535.611, 0, 0),
    (560.302, 0, 0),
    (584.993, 0, 1),
    (609.684, 0, 1),
    (634.375, 0, 1),
    (659.066, 0, 1),
    (683.757, 0, 0),
    (708.448, 0, 0),
    (733.139, 0, 1),
    (757.830, 0, 0),
    (782.521, 0, 1),
    (807.212, 0, 0),
    (831.903, 0, 0),
    (856.594, 0, 1),
    (881.285, 0, 1),
    (905.976, 0, 1),
    (930.667, 0, 0),
    (955.358, 0, 0),
    (980.049, 0, 1),
    (1004.740, 0, 1),
    (1029.431, 0, 0),
    (1054.122, 0, 0),
    (1078.813, 0, 0),
    (1103.504, 0, 1),
    (1128.195, 0, 1),
    (1152.886, 0, 1),
    (1177.577, 0, 0),
    (1202.268, 0, 1),
    (1226.959, 0, 0),
    (1251.650, 0, 1),
    (1276.341, 0, 0),
    (1301.032, 0, 1),
    (1325.723, 0, 1),
    (1350.414, 0, 1),
    (1375.105, 0, 0),
    (1399.796, 0, 0),
    (1424.487, 0, 1),
    (1449.178, 0, 0),
    (1473.869, 0, 1),
    (1498.560, 0, 0),
    (1999.000, 0, 0),
    (1999.000, 0, 1),
    (1999.000, 0, 0),
    (1999.000, 0, 1),
    (1999.000, 0, 0),
    (1999.000, 0, 1),
    (1999.000, 0, 0),
    (1999.000, 0, 1),
    (3050.000, 0, 0),
    (3050.000, 0, 1),
    (3050.000, 0, 1),
    (3051.000, 0, 1),
    (3176.000, 0, 0),
    (3301.000, 0, 1),
    (3426.000, 0, 1),
    (3551.000, 0, 1),
    (3676.000, 0, 1),
]
# (ms after the start, fault, lasting ms)
FAULTS = [
]
# The most the claimed policy admits of each key's requests, at their planned times or
# up to SLACK_MS later (ratelab's specification of first-hit:10,1s, the most over the timings it
# tried), for the keys the finding names: all of them (MOST), and those planned before
# the first fault (MOST_BEFORE_FAULT, used when the script applies one).
MOST = {0: 29}
MOST_BEFORE_FAULT = {0: 29}
# From any state, at most BURST + AMOUNT * span / PERIOD_MS admitted in any span (ms).
BURST, AMOUNT, PERIOD_MS = 20, 10, 1000


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


def send(url, key):
    req = urllib.request.Request(url.replace("{key}", key))
    if KEY_HEADER:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("Retry-After")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After")
    except OSError as e:
        return "no answer: %s" % e, None


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
        status, retry_after = send(urls[instance % len(urls)], "%s-k%d" % (prefix, key))
        seen[i] = (key, sent * 1000, (time.monotonic() - start) * 1000, status, retry_after, at)

    threads = [threading.Thread(target=request, args=(i,) + r) for i, r in enumerate(REQUESTS)]
    for t in threads:
        t.start()
    applied = []
    for at, kind, ms in FAULTS:
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        began = (time.monotonic() - start) * 1000
        if fault(kind, ms, opts) and kind != "slow":
            applied.append((began, (time.monotonic() - start) * 1000))
    for t in threads:
        t.join()
    found = False
    # Held: every request in flight when the store went down, or sent in the first half of
    # its spell, answered only once it was back.
    for began, ended in applied:
        early = [s for s in seen if s and s[1] < (began + ended) / 2 and s[2] > began]
        if early and all(s[2] > ended for s in early):
            found = True
            print("held: %d requests got no answer until the store was back, %.0f ms after it went down" % (len(early), ended - began))
    for s in seen:
        if s and not retry_after_ok(s[4]):
            found = True
            print("key %d: Retry-After %r is neither delay-seconds nor an HTTP-date" % (s[0], s[4]))
            break
    # Answers a fault touched (in flight from its start until the recovery after it) are held
    # to no policy; the others are, in segments between the faults.
    zones = [(began, ended + RECOVERY_MS) for began, ended in applied]
    def segment(s):
        if any(s[1] <= end and s[2] >= begin for begin, end in zones):
            return None
        return sum(1 for _, end in zones if end < s[1])
    most = MOST_BEFORE_FAULT if applied else MOST
    for key in sorted(most):
        mine = [s for s in seen if s and s[0] == key and segment(s) is not None]
        admitted = [s for s in mine if isinstance(s[3], int) and 200 <= s[3] < 400 and s[3] not in DENY]
        denied = sum(1 for s in mine if s[3] in DENY)
        print("key %d: %d requests, %d admitted, %d denied, %d without a decision" % (key, len(mine), len(admitted), denied, len(mine) - len(admitted) - denied))
        first = [s for s in admitted if segment(s) == 0]
        late = [s for s in mine if segment(s) == 0 and not s[5] <= s[1] <= s[5] + SLACK_MS]
        if len(first) > most[key]:
            if late:
                print("  count: inconclusive, %d requests went out more than %d ms from their planned times" % (len(late), SLACK_MS))
            else:
                found = True
                print("  count: %d admitted, where the policy admits at most %d of these requests" % (len(first), most[key]))
        for part in sorted(set(segment(s) for s in admitted)):
            run = sorted((s for s in admitted if segment(s) == part), key=lambda s: s[1])
            for i in range(len(run)):
                last = 0
                for j in range(i, len(run)):
                    last = max(last, run[j][2])
                    span = last - run[i][1] + CLOCK_RES_MS
                    if j - i + 1 > BURST + AMOUNT * span / PERIOD_MS:
                        found = True
                        print("  envelope: %d admitted within %.1f ms (sent at %.1f ms on), where at most %d may be" % (j - i + 1, span, run[i][1], BURST + AMOUNT * span / PERIOD_MS))
                        break
                else:
                    continue
                break
    print("reproduced" if found else "not reproduced this time")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
