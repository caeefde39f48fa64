#!/usr/bin/env bash
# System calls per request, side by side in one run: strace counts the calls the bare server
# on the same HTTP front (the anchor), ratelab-server in memory, and on a private
# redis-server the bare server running the bucket script once per request and ratelab-server
# make under the same wrk load (scripts/bench-http.sh's policy and load, the hot key), after
# a warm-up. The counts are the servers' structure (reads, writes, wake-ups), not their speed:
# strace slows every call, so requests per second under it mean nothing.
#
#   scripts/syscalls-http.sh [SECONDS] [CONNECTIONS] [OTHER_SERVER]
#
# (defaults: 3 s, 32 connections). OTHER_SERVER, another build of ratelab-server (of an
# earlier commit, say), adds its rows on Redis, measured in the same run.
#
# Needs strace and wrk; redis-server for the Redis rows. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-3}"
CONNS="${2:-32}"
OTHER=
if [ -n "${3:-}" ]; then
  [ -x "$3" ] || { echo "$3 is not an executable" >&2; exit 2; }
  OTHER="$(realpath "$3")"
fi
for tool in strace wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install $tool)" >&2; exit 2; }
done

. scripts/bench-lib.sh
build_server bare
write_http_load

# The system calls per request of the server PID on PORT, as "name count" lines, largest
# first (those of at least 0.01 per request).
per_request() { # port, pid, label
  local out="$WORK/strace.$1" tracer n
  wrk -t1 -c"$CONNS" -d1s -H "x-api-key: hot" "http://127.0.0.1:$1/" > /dev/null
  strace -c -f -p "$2" -o "$out" 2> "$WORK/strace.$1.log" &
  tracer=$!
  # strace attaches to every thread before the load starts (or says why it cannot: a
  # kernel that allows tracing only one's own children, say).
  sleep 0.5
  kill -0 "$tracer" 2> /dev/null || { echo "strace could not attach to $2:" >&2; cat "$WORK/strace.$1.log" >&2; exit 1; }
  wrk -t1 -c"$CONNS" -d"${SECS}s" -H "x-api-key: hot" "http://127.0.0.1:$1/" > "$WORK/wrk.out"
  kill -INT "$tracer"
  wait "$tracer" || true
  if grep -qE "Non-2xx|Socket errors" "$WORK/wrk.out"; then
    echo "refused: non-2xx answers or socket errors from port $1:" >&2; cat "$WORK/wrk.out" >&2; exit 1
  fi
  n=$(awk '/requests in/ {print $1}' "$WORK/wrk.out")
  [ "${n:-0}" -gt 0 ] || { echo "refused: no requests answered on port $1:" >&2; cat "$WORK/wrk.out" >&2; exit 1; }
  # strace -c's table: the calls column is the fourth of a row with an errors column, else
  # the fourth too (usecs/call, then calls); the name is the last.
  awk -v n="$n" -v label="$3" 'NR > 2 && $NF != "total" && $4 ~ /^[0-9]+$/ && $4 / n >= 0.01 {
    printf "| %-27s | %-14s | %6.2f |\n", label, $NF, $4 / n }' "$out" | sort -t'|' -k4 -rn
}

P_BARE=$(free_port)
start "$P_BARE" "$BIN/examples/bare" "127.0.0.1:$P_BARE" 1
BARE_PID=$LAST
P_MEM=$(free_port)
start "$P_MEM" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_MEM" --limits "$WORK/limits.toml" --workers 1
MEM_PID=$LAST

echo "System calls per request (strace -c -f), wrk -t1 -c$CONNS -d${SECS}s, hot key, $(date -u +%F)"
echo "| target                      | system call    | per request |"
echo "|-----------------------------|----------------|------:|"
per_request "$P_BARE" "$BARE_PID" "bare front (no limiting)"
per_request "$P_MEM" "$MEM_PID" "ratelab-server, in memory"
if command -v redis-server >/dev/null; then
  start_redis
  P_RBARE=$(free_port)
  start "$P_RBARE" "$BIN/examples/bare" "127.0.0.1:$P_RBARE" 1 "redis://127.0.0.1:$P_RDS/"
  RBARE_PID=$LAST
  P_REDIS=$(free_port)
  start "$P_REDIS" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_REDIS" --limits "$WORK/limits.toml" --workers 1 --redis "redis://127.0.0.1:$P_RDS/"
  REDIS_PID=$LAST
  per_request "$P_RBARE" "$RBARE_PID" "bare front, one script call"
  per_request "$P_REDIS" "$REDIS_PID" "ratelab-server, on Redis"
  if [ -n "$OTHER" ]; then
    P_OTHER=$(free_port)
    start "$P_OTHER" "$OTHER" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_OTHER" --limits "$WORK/limits.toml" --workers 1 --redis "redis://127.0.0.1:$P_RDS/"
    per_request "$P_OTHER" "$LAST" "the other build, on Redis"
  fi
fi
