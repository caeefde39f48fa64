#!/usr/bin/env python3
"""Per-request counts from a callgrind profile of a simulator run.

    python3 scripts/callgrind-calls.py cg.out REQUESTS

Prints instructions, timer registrations, Sleep polls, task polls, task spawns and
allocations per simulated request: the exact call counts callgrind recorded (the same on
every run of the same binary and input), divided by REQUESTS (the run's request count).
Then the Rust allocations (`__rust_alloc`) by the crate of the function that made them:
madsim (with its timer and task crates), ratelab, or the standard library's collections,
strings and formatting (called from either).
"""
import collections
import re
import sys

COUNTED = [
    ("timer registrations (`TimeHandle::add_timer_at`)", [r"TimeHandle::add_timer_at$"]),
    ("`Sleep` polls", [r"Sleep as core::future::future::Future>::poll$"]),
    ("task polls (`RawTask::run`)", [r"RawTask<.*>::run$"]),
    ("task spawns (`Spawner::spawn_inner`)", [r"Spawner::spawn_inner"]),
    ("allocations (`malloc` + `realloc`)", [r"^malloc$", r"^realloc$"]),
]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], int(sys.argv[2])
    names, calls, total = {}, collections.Counter(), None
    callee, caller = None, None
    sites = collections.Counter()
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(cfn|fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                kind, ident, name = m.groups()
                if name:
                    names[ident] = name
                if kind == "cfn":
                    callee = ident
                else:
                    caller = ident
                continue
            m = re.match(r"^calls=(\d+)", line)
            if m and callee is not None:
                n = int(m.group(1))
                calls[names.get(callee, callee)] += n
                if names.get(callee, "").endswith("__rust_alloc"):
                    sites[names.get(caller, "")] += n
                continue
            m = re.match(r"^(?:summary|totals): (\d+)", line)
            if m:
                total = int(m.group(1))
    if total is None:
        sys.exit(f"{path}: no instruction total (is it a callgrind output file?)")
    print(f"| instructions | {total / requests:,.0f} |")
    for label, patterns in COUNTED:
        n = sum(v for k, v in calls.items() if any(re.search(p, k) for p in patterns))
        print(f"| {label} | {n / requests:.1f} |")
    groups = collections.Counter()
    for site, n in sites.items():
        name = site.lstrip("<")
        if re.match(r"(madsim|naive_timer|async_task)", name):
            groups["madsim"] += n
        elif name.startswith("ratelab"):
            groups["ratelab"] += n
        elif "__rdl_alloc" in name or "__rust_alloc" in name:
            continue
        else:
            groups["std collections, strings, formatting"] += n
    for g in ("madsim", "ratelab", "std collections, strings, formatting"):
        print(f"| Rust allocations made in {g} | {groups[g] / requests:.1f} |")


if __name__ == "__main__":
    main()
