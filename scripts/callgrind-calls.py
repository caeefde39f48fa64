#!/usr/bin/env python3
"""Per-request counts from a callgrind profile of a simulator run.

    python3 scripts/callgrind-calls.py cg.out REQUESTS

Prints instructions, madsim messages, timer registrations, Sleep polls, task polls, task
spawns, clock readings and allocations per simulated request: the exact call counts callgrind recorded (the same on
every run of the same binary and input), divided by REQUESTS (the run's request count).
Then the Rust allocations (`__rust_alloc`) by the crate of the function that made them:
madsim (with its timer and task crates), ratelab, or the standard library's collections,
strings and formatting (called from either).

Last, the instructions themselves (each function's own, not its callees') by where they run:
the allocator, memory copies, formatting and hashing, madsim's network, timers, executor and
clock, ratelab's crates, and the rest.

Profile a whole process (no --toggle-collect): under a toggled collection some of callgrind's
call counts come out inflated, up to twice. For the madsim floor alone, profile the
`madsim_floor` example of ratelab-sim.
"""
import collections
import re
import sys

COUNTED = [
    ("madsim messages (`Network::try_send`)", [r"net::network::Network::try_send$"]),
    ("timer registrations (`TimeHandle::add_timer_at`)", [r"TimeHandle::add_timer_at$"]),
    ("`Sleep` polls", [r"Sleep as core::future::future::Future>::poll$"]),
    ("task polls (`RawTask::run`)", [r"RawTask<.*>::run$"]),
    (
        "task spawns (`Spawner::spawn_inner`, `task::spawn`)",
        [r"Spawner::spawn_inner", r"^madsim::sim::task::spawn$"],
    ),
    (
        "clock readings through madsim's `clock_gettime` shim (`Instant::now`)",
        [r"^<std::time::Instant>::now$"],
    ),
    ("allocations (`malloc` + `realloc`)", [r"^malloc$", r"^realloc$"]),
]

# Each function's own instructions go to the first group whose pattern its name matches.
GROUPS = [
    ("the allocator (`malloc`, `free`)", r"malloc|free|^_int_|__rust_alloc|__rust_dealloc|__rdl_|realloc|unlink_chunk|tcache|arena"),
    ("memory copies (`memcpy`, `memmove`)", r"memcpy|memmove|memset"),
    ("ratelab's gateway pipeline", r"^<?ratelab_gateway"),
    ("ratelab's simulator (cluster, store node, transport, timeouts, report)", r"^<?ratelab_sim"),
    ("ratelab's store, policies and checkers", r"^<?ratelab_(store|core|check)"),
    ("formatting and hashing (madsim formats and hashes each destination address)", r"core::fmt|Display|pad_integral|fmt::Write|Hasher|hash_one|format_inner"),
    ("madsim's network (links, mailboxes, random delays)", r"madsim::sim::net|GlobalRng|rand_core|rand::|buggify|oneshot"),
    ("madsim's timers and `Sleep`", r"naive_timer|add_timer|sleep::Sleep|TimeRuntime|TimeHandle|BinaryHeap|sleep_until"),
    ("madsim's executor and tasks", r"async_task|Executor|madsim::sim::task|RawTask|context::|TaskEnterGuard|[Ww]aker|spawn"),
    ("madsim's clock shim (`clock_gettime`, `Instant`)", r"clock_gettime|Instant|Timespec"),
]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], int(sys.argv[2])
    names, calls, total = {}, collections.Counter(), None
    callee, caller = None, None
    sites = collections.Counter()
    own, after_call = collections.Counter(), False
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and not after_call:
                    own[names.get(caller, caller)] += int(parts[1])
                after_call = False
                continue
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
                after_call = True
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
    print()
    spent = collections.Counter()
    for name, n in own.items():
        label = next((g for g, p in GROUPS if re.search(p, name or "")), "the rest")
        spent[label] += n
    for label, _ in GROUPS + [("the rest", "")]:
        print(f"| instructions in {label} | {spent[label] / requests:,.0f} |")


if __name__ == "__main__":
    main()
