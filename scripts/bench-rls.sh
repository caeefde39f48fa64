#!/usr/bin/env bash
# Envoy's rate limit service, side by side in one run: a gRPC load generator
# (crates/server/examples/rls_load.rs) against a bare RLS server on the same tonic stack that
# limits nothing (the anchor), ratelab-server's rate limit service in memory, and the same on
# a private Redis beside its own anchor (the bare server making one script call per call, as
# ratelab-server makes one). On one hot descriptor value and on 10 000. Prints one table and
# the ratios.
#
#   scripts/bench-rls.sh [SECONDS] [CONCURRENCY] [WORKERS]
#
# (defaults: 5 s, 32 calls in flight, each on a connection of its own, 1 worker thread for
# each server: the load generator runs on a core of its own). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"
CONC="${2:-32}"
WORKERS="${3:-1}"

. scripts/bench-lib.sh
build_server rls_load

# Every call admitted, each a whole decision: a bucket per value of 10⁶, refilled at 10⁶ a
# second (within the Redis script's exact range).
cat > "$WORK/limits.toml" <<'TOML'
[[domain]]
domain = "bench"
[[domain.descriptors]]
key = "key"
rate_limit = { unit = "second", requests_per_unit = 1000000 }
TOML

G_BARE=$(free_port); start "$G_BARE" "$BIN/examples/rls_load" bare "127.0.0.1:$G_BARE" "$WORKERS"; PID_BARE=$LAST
H_MEM=$(free_port); G_MEM=$(free_port)
start "$G_MEM" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$H_MEM" --grpc-listen "127.0.0.1:$G_MEM" --limits "$WORK/limits.toml" --workers "$WORKERS"
PID_MEM=$LAST
G_RDS=""
if command -v redis-server >/dev/null; then
  start_redis
  G_BRD=$(free_port); start "$G_BRD" "$BIN/examples/rls_load" bare "127.0.0.1:$G_BRD" "$WORKERS" "redis://127.0.0.1:$P_RDS"; PID_BRD=$LAST
  H_RDS=$(free_port); G_RDS=$(free_port)
  start "$G_RDS" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$H_RDS" --grpc-listen "127.0.0.1:$G_RDS" --limits "$WORK/limits.toml" --redis "redis://127.0.0.1:$P_RDS" --workers "$WORKERS"
  PID_RDS=$LAST
fi

echo "ShouldRateLimit, $CONC calls in flight for ${SECS}s, $WORKERS worker thread(s) per server, $(nproc) cores, $(date -u +%F)"
printf "| %-34s | %-8s | %10s | %7s | %7s | %12s |\n" target keys "calls/s" "p50 µs" "p99 µs" "CPU µs/call"
printf "|%s|%s|%s|%s|%s|%s|\n" "------------------------------------" "----------" "-----------:" "--------:" "--------:" "-------------:"
declare -A RATE CPU
row() { # label, keys (hot|many), port, server pid
  local out r p50 p99 n=1 t0 t1 us
  [ "$2" = many ] && n=10000
  t0=$(cpu "$4")
  out=$("$BIN/examples/rls_load" load "127.0.0.1:$3" "$SECS" "$CONC" "$n") || { echo "refused: $1, $2" >&2; exit 1; }
  t1=$(cpu "$4")
  read -r r p50 p99 calls <<< "$out"
  # The server's CPU per call: ticks of 1/CLK_TCK s over the calls it answered.
  us=$(python3 -c "import os; print(f'{($t1 - $t0) / os.sysconf(\"SC_CLK_TCK\") * 1e6 / $calls:.1f}')")
  RATE["$1/$2"]=$r
  CPU["$1/$2"]=$us
  printf "| %-34s | %-8s | %10s | %7s | %7s | %12s |\n" "$1" "$2" "$r" "$p50" "$p99" "$us"
}
for keys in hot many; do
  row "bare tonic RLS (no limiting)" $keys "$G_BARE" "$PID_BARE"
  row "ratelab-server, in memory" $keys "$G_MEM" "$PID_MEM"
  if [ -n "$G_RDS" ]; then
    row "bare tonic RLS + one script call" $keys "$G_BRD" "$PID_BRD"
    row "ratelab-server, on Redis" $keys "$G_RDS" "$PID_RDS"
  fi
done
echo
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
for keys in hot many; do
  bare="bare tonic RLS (no limiting)/$keys"
  echo "$keys: ratelab in memory / bare: calls/s $(ratio "${RATE["ratelab-server, in memory/$keys"]}" "${RATE[$bare]}"), server CPU per call $(ratio "${CPU["ratelab-server, in memory/$keys"]}" "${CPU[$bare]}")"
  if [ -n "$G_RDS" ]; then
    anchor="bare tonic RLS + one script call/$keys"
    echo "$keys: ratelab on Redis / bare + one script call: calls/s $(ratio "${RATE["ratelab-server, on Redis/$keys"]}" "${RATE[$anchor]}"), server CPU per call $(ratio "${CPU["ratelab-server, on Redis/$keys"]}" "${CPU[$anchor]}") (Redis's own CPU not counted)"
  fi
done
