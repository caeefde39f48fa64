#!/usr/bin/env python3
"""What ratelab-server's own instructions per request buy, from a callgrind dump of it.

    python3 scripts/callgrind-parts.py DUMP REQUESTS

Reads `callgrind_annotate --inclusive=yes DUMP` and prints, per request (REQUESTS: the
requests served in the dump's window), the inclusive instructions of the parts of a request
that ratelab-server runs and a bare front does not: the decision and, within it, the store
call, the steps around it, the RateLimit fields, the request id and log line, the header
checks and the key; then the fields and id written into the response and the path and method
checks. `scripts/instr-http.sh` runs it on its profile of ratelab-server on Redis.

A part is the inclusive count of the functions that match its patterns (their callees
included), less the parts named after `-`; each pattern names one function that does not
call another of its part's. The store call is counted under `run_layer` (one limit on its
own): a request whose limits are decided together calls it from elsewhere. A function the compiler inlined into its caller
has no count of its own: its part is printed as "inlined" and its instructions stay in its
caller's.
"""
import re
import subprocess
import sys

# (part, patterns of the functions it adds, patterns of the functions it subtracts). The
# patterns match callgrind_annotate's function names (file and object stripped).
PARTS = [
    ("the service call: decision, inner service, response fields", [r"front::Front<C,E,S> as hyper::service::service::Service<.*>>::call::\{\{closure\}\}(::\{\{closure\}\})?$"], []),
    ("the decision (`Gateway::check`)", [r"pipeline::Gateway<C,E>::check::\{\{closure\}\}$"], []),
    ("- the store call (`decide_remote`)", [r"ratelab_store::client::decide_remote::\{\{closure\}\}$"], []),
    ("  - of which the script's command encoded (`Command::new`)", [r"redis_lane::codec::Command::new$"], []),
    ("  - of which the reply awaited on the lane (`RedisStore::on_lane`)", [r"RedisStore::on_lane::\{\{closure\}\}$"], []),
    (
        "- around the store call: deadline, breaker, latency, denial cache (`run_layer` less the call)",
        [r"run_layer::\{\{closure\}\}$"],
        [r"ratelab_store::client::decide_remote::\{\{closure\}\}$"],
    ),
    ("- the RateLimit fields and the counters (`Gateway::account`)", [r"pipeline::Gateway<C,E>::account$"], []),
    ("- the request id and the log line (`Gateway::log`)", [r"pipeline::Gateway<C,E>>::log$"], []),
    ("- the keyed headers sent once, in one spelling (`unambiguous`)", [r"Headers for http::header::map::HeaderMap>::each$", r"Headers for http::header::map::HeaderMap>::each_name$"], []),
    ("- the limit's key (`Key::tagged`)", [r"ratelab_store::key::Key::tagged$"], []),
    ("the fields and the request id written into the response (`http::finish`)", [r"ratelab_gateway::http::finish$"], []),
    ("the path and method checked (`RateLimitLayer::head`)", [r"RateLimitLayer<C,E>::head$"], []),
]

LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(?:\*\s+)?(?:[^:]*):(.*?)(?:\s+\[[^\]]*\])?\s*$")


def totals(dump):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # Functions of one name (instances of one generic function, say) add up.
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            found[m.group(2)] = found.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        requests = int(sys.argv[2])
    except ValueError:
        requests = 0
    if requests <= 0:
        sys.exit(f"REQUESTS must be a positive integer, not {sys.argv[2]!r}")
    found = totals(sys.argv[1])

    def total(patterns):
        hits = [n for name, n in found.items() if any(re.search(p, name) for p in patterns)]
        return sum(hits) if hits else None

    print("| part of a request (ratelab-server on Redis) | instr/req |")
    print("|---|---:|")
    for part, add, sub in PARTS:
        plus, minus = total(add), total(sub) if sub else 0
        if plus is None or minus is None:
            print(f"| {part} | inlined |")
        else:
            n = f"{(plus - minus) / requests:,.0f}".replace(",", " ")
            print(f"| {part} | {n} |")


if __name__ == "__main__":
    main()
