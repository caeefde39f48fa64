#!/usr/bin/env python3
"""Prints the decision benchmark as a Markdown table from criterion's saved estimates.

Run after `cargo bench -p ratelab-store --bench decision`:

    python3 scripts/bench-table.py

Columns: median ns per decision for ratelab and for governor (keyed, and direct where it
applies), and governor-keyed / ratelab (above 1.0 means ratelab is faster).
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "target" / "criterion"


def median_ns(group: str, bench: str) -> float | None:
    path = ROOT / group / bench / "new" / "estimates.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["median"]["point_estimate"]


def main() -> int:
    rows = []
    for threads in (1, 2):
        group = f"decision_{threads}-thread"
        for keys in ("single-key", "10k-keys"):
            ours = median_ns(group, f"ratelab_{keys}")
            keyed = median_ns(group, f"governor-keyed_{keys}")
            direct = median_ns(group, f"governor-direct_{keys}")
            if ours is None or keyed is None:
                print(f"missing results for {group}/{keys}: run the benchmark first", file=sys.stderr)
                return 1
            rows.append((threads, keys, ours, keyed, direct))
    print("| threads | keys | ratelab ns | governor keyed ns | governor direct ns | keyed / ratelab |")
    print("|---:|---|---:|---:|---:|---:|")
    for threads, keys, ours, keyed, direct in rows:
        d = f"{direct:.1f}" if direct is not None else "–"
        print(f"| {threads} | {keys} | {ours:.1f} | {keyed:.1f} | {d} | {keyed / ours:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
