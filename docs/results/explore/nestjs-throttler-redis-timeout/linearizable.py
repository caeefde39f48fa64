#!/usr/bin/env python3
"""Reproduces a finding of `ratelab audit --explore` on nestjs-throttler/redis-timeout (claimed policy first-hit:10,1s):

    linearizable: key \"ratelab-probe-5046-b0e02e8a24d2-s1-k0@0\": request 69: denied at 5095178394ns; at most 9 units were admitted that its count could hold (decided within 1000000000ns before it, or in flight when a request that was could have been sent), and the limit is 10 (0 explained before it); a phantom denial

Start the target, then: python3 {this file} [URL ...] [--store-pid PID] [--restart CMD]
[--redis-port PORT], one URL per instance ({key} where the key goes in the path), the
store's pid to freeze or kill it, the command that starts it again, its Redis port to
pause it. Python's standard library only. Exit 1: reproduced; 0: not this time.
In ratelab: ratelab audit --explore nestjs-throttler/redis-timeout --replay docs/results/explore/nestjs-throttler-redis-timeout/linearizable.json
"""
import email.utils, os, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

URLS = ["http://127.0.0.1:34561/", "http://127.0.0.1:36687/"]
KEY_HEADER = "x-key"
DENY = (429,)
ALIGN_MS = 1000
CLOCK_RES_MS = 2
RECOVERY_MS = 1000
SLACK_MS = 20
# (ms after the start, key, instance)
REQUESTS = [
    (871.647, 1, 0),
    (896.647, 1, 0),
    (921.647, 1, 0),
    (946.647, 1, 0),
    (971.647, 1, 0),
    (996.647, 1, 0),
    (1171.647, 1, 0),
    (1196.647, 1, 0),
    (1221.647, 1, 0),
    (1246.647, 1, 0),
    (1271.647, 1, 0),
    (1296.647, 1, 0),
    (1321.647, 1, 0),
    (1346.647, 1, 0),
    (1371.647, 1, 0),
    (1396.647, 1, 0),
    (1421.647, 1, 0),
    (1950.000, 1, 0),
]
# (ms after the start, fault, lasting ms)
FAULTS = [
]
# The most the claimed policy admits of each key's requests, at their planned times or
# up to SLACK_MS later (ratelab's specification of first-hit:10,1s, the most over the timings it
# tried), for the keys the finding names: all of them (MOST), and those planned before
# the first fault (MOST_BEFORE_FAULT, used when the script applies one).
MOST = {1: 11}
MOST_BEFORE_FAULT = {1: 11}
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
