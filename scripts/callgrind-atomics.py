#!/usr/bin/env python3
"""Atomic read-modify-write instructions per simulated request, from a callgrind profile.

    valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \\
        --callgrind-out-file=cg.out BINARY run /tmp/bench.json --threads 1
    python3 scripts/callgrind-atomics.py cg.out BINARY REQUESTS [TOP]

Finds BINARY's `lock`-prefixed instructions and its exchanges with memory (`xchg` locks
implicitly) with objdump, then adds up how often callgrind saw each one run, over REQUESTS
(the run's request count). Prints the total per request, then the TOP functions (default 25)
that run most of them. An uncontended atomic operation costs tens of cycles, far more than
its one instruction: the instruction count alone misses it. Atomic instructions in shared libraries
(the C library) are not counted; the instruction total counts everything.
"""
import collections
import os
import re
import subprocess
import sys


def locked_addresses(binary):
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary],
        capture_output=True, text=True, check=True,
    ).stdout
    found = set()
    for line in out.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(lock |xchg\s+.*\()", line)
        if m:
            found.add(int(m.group(1), 16))
    return found


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    profile, binary, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    locked = locked_addresses(binary)
    by_fn = collections.Counter()
    total_ir = 0
    fn, after_call, positions, obj, ours = None, False, None, None, False
    target = os.path.realpath(binary)
    with open(profile) as f:
        for line in f:
            if line.startswith("positions:"):
                positions = line.split()[1:]
            elif line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
                # Only the binary's own instructions: a shared library's addresses can
                # coincide with the binary's.
                ours = obj is not None and os.path.realpath(obj) == target
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("0x"):
                if after_call:  # the call's inclusive cost, not an instruction's own
                    after_call = False
                    continue
                parts = line.split()
                if positions != ["instr", "line"] and positions != ["instr"]:
                    sys.exit("profile it with --dump-instr=yes --compress-pos=no")
                cost = int(parts[len(positions)]) if len(parts) > len(positions) else 0
                total_ir += cost
                if ours and int(parts[0], 16) in locked:
                    by_fn[fn] += cost
    n = max(requests, 1)
    print(f"instructions per request: {total_ir / n:,.0f}")
    print(f"atomic read-modify-writes per request: {sum(by_fn.values()) / n:.1f}")
    for name, count in by_fn.most_common(top):
        print(f"{count / n:7.2f}  {name[:150]}")


main()
