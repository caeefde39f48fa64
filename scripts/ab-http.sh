#!/usr/bin/env bash
# Two builds of ratelab-server side by side: wrk against build A and build B in turn, in
# memory and on one private redis-server, on one hot key and on 10 000 keys, with the policy
# and load of scripts/bench-http.sh. A change's effect on throughput is the ratio of B to A
# within each round (the two runs of a round are back to back, so a slow spell of the
# machine falls on both; each build goes first in every other round).
#
#   scripts/ab-http.sh A_BINARY B_BINARY [SECONDS] [CONNECTIONS] [ROUNDS]
#
# (defaults: 3 s, 32 connections, 5 rounds; one worker thread per server; BENCH_LIMITS=pair
# decides every request at two limits, scripts/bench-lib.sh). Each ratio is the
# median of the rounds' own (of an even number of rounds, the mean of the middle two). Build A
# from another commit with, say, `git worktree add /tmp/a COMMIT && (cd /tmp/a && cargo build
# --profile production -p ratelab-server)` (or `--release` before the production profile).
#
# Needs wrk and redis-server. Loopback only.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/ab-http.sh A_BINARY B_BINARY [SECONDS] [CONNECTIONS] [ROUNDS]" >&2; exit 2; }
for bin in "$1" "$2"; do [ -x "$bin" ] || { echo "$bin is not an executable" >&2; exit 2; }; done
# Paths as given, from where the script was called.
A="$(realpath "$1")"; B="$(realpath "$2")"
SECS="${3:-3}"
CONNS="${4:-32}"
ROUNDS="${5:-5}"
cd "$(dirname "$0")/.."
for tool in wrk redis-server; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install $tool)" >&2; exit 2; }
done
. scripts/bench-lib.sh
write_http_load

declare -A PID_OF PORT
start_redis
for build in A B; do
  bin=$A; [ $build = B ] && bin=$B
  # A build with an admin listener gets a free port for it, so that several run at once.
  admin=(); "$bin" --help | grep -q -- --admin-listen && admin=(--admin-listen 127.0.0.1:0)
  p=$(free_port); start "$p" "$bin" "${admin[@]}" --listen "127.0.0.1:$p" --limits "$WORK/limits.toml" --workers 1
  PID_OF[$p]=$LAST; PORT[$build/memory]=$p
  p=$(free_port); start "$p" "$bin" "${admin[@]}" --listen "127.0.0.1:$p" --limits "$WORK/limits.toml" --workers 1 --redis "redis://127.0.0.1:$P_RDS"
  PID_OF[$p]=$LAST; PORT[$build/redis]=$p
done

declare -A RUNS
for round in $(seq "$ROUNDS"); do
  # Each build goes first in every other round: neither gains from its place.
  order="A B"; [ $((round % 2)) = 0 ] && order="B A"
  for keys in hot many; do
    for store in memory redis; do
      for build in $order; do
        p=${PORT[$build/$store]}
        out=$(measure "$p" $keys $store) || { echo "refused: build $build, $store, $keys" >&2; exit 1; }
        RUNS[$store/$keys/$build]+="$out;"
      done
    done
  done
done

echo "A: $A"
echo "B: $B"
echo "wrk -t1 -c$CONNS -d${SECS}s, one worker thread per server, $(nproc) cores, $ROUNDS rounds, $(date -u +%F)"
echo
echo "| store | keys | req/s, A | req/s, B | server CPU µs/req, A | server CPU µs/req, B | B / A (rounds' median, range) |"
echo "|---|---|---:|---:|---:|---:|---|"
for store in memory redis; do
  for keys in hot many; do
    python3 - "$store" "$keys" "${RUNS[$store/$keys/A]}" "${RUNS[$store/$keys/B]}" \
      "$(round_ratios "${RUNS[$store/$keys/A]}" "${RUNS[$store/$keys/B]}")" <<'EOF'
import sys
store, keys, a, b, rounds = sys.argv[1:]
runs = lambda s: [r.split() for r in s.split(";") if r]
a, b = runs(a), runs(b)
span = lambda xs, f: f"{f(min(xs))}–{f(max(xs))}"
rps = lambda rs: [float(r[0]) for r in rs]
cpu = lambda rs: [float(r[3]) for r in rs]
ratios = [float(r) for r in rounds.split()]
mid = len(ratios) // 2
median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
whole = lambda v: f"{v:,.0f}".replace(",", " ")
print(f"| {store} | {keys} | {span(rps(a), whole)} | {span(rps(b), whole)} | "
      f"{span(cpu(a), str)} | {span(cpu(b), str)} | "
      f"{median:.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}) |")
EOF
  done
done
