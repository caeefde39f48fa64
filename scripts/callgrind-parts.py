#!/usr/bin/env python3
"""What ratelab-server's own instructions per request buy, from a callgrind dump of it.

    python3 scripts/callgrind-parts.py DUMP REQUESTS

Reads `callgrind_annotate --inclusive=yes DUMP` and prints, per request (REQUESTS: the
requests served in the dump's window), the inclusive instructions of the parts of a request
that ratelab-server runs and a bare front does not. On Redis a request at one limit is
decided in two halves around its script call (`ratelab_gateway::front`): the first half, up
to the call sent, with the path and method checks, the header checks, the key and the
command within it; the reply awaited within the request's deadline, and read; the second
half, with the RateLimit fields, the counters, the request id and the log line within it;
then the fields and id written into the response. `scripts/instr-http.sh` runs it on its profile of
ratelab-server on Redis.

A part is the inclusive count of the functions that match its patterns (their callees
included), less the parts named after `-`; each pattern names one function that does not
call another of its part's. A function the compiler inlined into its caller has no count of
its own: its part is printed as "inlined" and its instructions stay in its caller's.
"""
import re
import subprocess
import sys

# (part, patterns of the functions it adds, patterns of the functions it subtracts). The
# patterns match callgrind_annotate's function names (file and object stripped).
PARTS = [
    ("the first half, up to the script call sent (`RateLimitLayer::begin`)", [r"http::RateLimitLayer<C,E>::begin$"], []),
    ("- the path and method checked (`RateLimitLayer::head`)", [r"RateLimitLayer<C,E>::head$"], []),
    ("- the keyed headers sent once, in one spelling (`unambiguous`)", [r"Headers for http::header::map::HeaderMap>::each$", r"Headers for http::header::map::HeaderMap>::each_name$"], []),
    ("- the limit's key (`Key::tagged`)", [r"ratelab_store::key::Key::tagged$"], []),
    ("- the breaker, the budget, the cost's check (`Gateway::layer_start`)", [r"Gateway<C,E>>::layer_start$"], []),
    ("- the script's command encoded (`Command::new`)", [r"redis_lane::codec::Command::new$"], []),
    ("- the command queued or written on the lane (`Lane::call`)", [r"redis_lane::Lane::call$"], []),
    ("the reply awaited within the request's deadline (`BoundedSent`)", [r"deadlines::BoundedSent as core::future::future::Future>::poll$"], []),
    ("the reply read into the limit's outcome (`Gateway::read_reply`)", [r"Gateway<C,E>>::read_reply$"], []),
    ("the second half, from the outcome (`Gateway::complete`, run where the answer's future is polled)", [r"Gateway<C,E>>::complete$"], []),
    ("- the latency, the breaker's record, the denial cache (`Gateway::layer_end`)", [r"Gateway<C,E>>::layer_end$"], []),
    ("- the RateLimit fields and the counters (`Gateway::account`)", [r"pipeline::Gateway<C,E>::account$"], []),
    ("- the request id and the log line (`Gateway::log_lazily`)", [r"Gateway<C,E>>::log_lazily$"], []),
    ("the fields and the request id written into the response (`http::finish`)", [r"ratelab_gateway::http::finish$"], []),
]

LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(?:\*\s+)?(?:[^:]*):(.*?)(?:\s+\[[^\]]*\])?\s*$")


def totals(dump):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--show=Ir", "--threshold=100", dump],
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
