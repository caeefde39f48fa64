#!/usr/bin/env python3
"""Per-request counts from a callgrind profile of a simulator run.

    python3 scripts/callgrind-calls.py cg.out REQUESTS

Prints instructions, timer registrations, Sleep polls, task polls, task spawns and
allocations per simulated request: the exact call counts callgrind recorded (the same on
every run of the same binary and input), divided by REQUESTS (the run's request count).
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
    callee = None
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
                continue
            m = re.match(r"^calls=(\d+)", line)
            if m and callee is not None:
                calls[names.get(callee, callee)] += int(m.group(1))
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


if __name__ == "__main__":
    main()
