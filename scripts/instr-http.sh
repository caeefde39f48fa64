#!/usr/bin/env bash
# The limiter's own cost in instructions, side by side in one run: valgrind's callgrind counts
# the user-space instructions a bare server on the same HTTP front (the anchor),
# ratelab-server in memory, and on a private redis-server (when installed) the bare server
# running the bucket script once per request (the anchor on Redis) and ratelab-server,
# spend per request under the same wrk load (redis-server's own are not counted). Counts
# move by a few per cent from run to run, where wrk's requests per second move by 10 % or
# more. The kernel's share of each request is not counted: its HTTP socket's TCP path is
# the same for every target, and on Redis the Redis socket's is left out too. Beside the
# instructions, the atomic read-modify-writes each target's own binary runs per request
# (scripts/callgrind-atomics.py): one instruction each, tens of cycles; and the misses of
# callgrind's simulated first-level caches (instructions, data; the machine's sizes, 32 KiB
# of instructions here) per request: a request whose code does not fit the instruction cache
# fetches much of it again every time, a cost the instruction count does not show.
#
#   scripts/instr-http.sh [SECONDS] [CONNECTIONS]      (defaults: 5 s, 8 connections)
#
# RATELAB_SERVER=PATH counts that build of ratelab-server instead of this checkout's (the
# anchors are still built here); BENCH_LIMITS=pair decides every request at two limits
# (scripts/bench-lib.sh).
#
# Needs valgrind and wrk; redis-server for the Redis rows. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"
CONNS="${2:-8}"
for tool in valgrind callgrind_control callgrind_annotate wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install valgrind wrk)" >&2; exit 2; }
done

. scripts/bench-lib.sh
build_server bare
SERVER="${RATELAB_SERVER:-$BIN/ratelab-server}"
[ -x "$SERVER" ] || { echo "RATELAB_SERVER=$SERVER is not an executable" >&2; exit 2; }

# The policy and the load every target gets (scripts/bench-lib.sh).
write_http_load

# Instructions per request of the server on PORT (started under callgrind, its pid in LAST)
# over a wrk run on KEYS (hot or many), after a warm-up; counters are zeroed in between. Its
# atomic operations per request go to $WORK/atomics (BINARY: the server's executable).
per_request() { # port, pid, keys, binary
  local extra=(-H "x-api-key: hot") out n total
  [ "$3" = many ] && extra=(-s "$WORK/many.lua")
  wrk -t1 -c"$CONNS" -d1s "${extra[@]}" "http://127.0.0.1:$1/" > /dev/null
  callgrind_control -z "$2" > /dev/null 2>&1
  wrk -t1 -c"$CONNS" -d"${SECS}s" "${extra[@]}" "http://127.0.0.1:$1/" > "$WORK/wrk.out"
  callgrind_control -d "$2" > /dev/null 2>&1
  if grep -qE "Non-2xx|Socket errors" "$WORK/wrk.out"; then
    echo "refused: non-2xx answers or socket errors from port $1:" >&2; cat "$WORK/wrk.out" >&2; exit 1
  fi
  n=$(awk '/requests in/ {print $1}' "$WORK/wrk.out")
  # The newest dump holds the load window alone.
  out=$(ls -t "$WORK/cg.$2".* | head -1)
  # Kept for the breakdown of ratelab-server's own on Redis (scripts/callgrind-parts.py).
  cp "$out" "$WORK/last.cg"
  echo "$n" > "$WORK/last.n"
  # The totals' events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
  read -r total i1 d1 < <(callgrind_annotate "$out" | awk '/PROGRAM TOTALS/ {gsub(",", ""); print $1, $7, $9 + $11}')
  python3 scripts/callgrind-atomics.py "$out" "$4" "$n" 0 | awk '/^atomic/ {print $NF}' > "$WORK/atomics"
  python3 -c "print(f'{$i1 / $n:.0f} {$d1 / $n:.0f}')" > "$WORK/misses"
  echo $((total / n))
}

# Each instruction's count kept (for the atomic ones), with full names and positions.
CALLGRIND=(valgrind --tool=callgrind --dump-instr=yes --cache-sim=yes --compress-pos=no --compress-strings=no --callgrind-out-file="$WORK/cg.%p")
P_BARE=$(free_port)
start "$P_BARE" "${CALLGRIND[@]}" "$BIN/examples/bare" "127.0.0.1:$P_BARE" 1
BARE_PID=$LAST
P_MEM=$(free_port)
start "$P_MEM" "${CALLGRIND[@]}" "$SERVER" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_MEM" --limits "$WORK/limits.toml" --workers 1
MEM_PID=$LAST
REDIS_PID=
if command -v redis-server >/dev/null; then
  start_redis
  P_REDIS=$(free_port)
  start "$P_REDIS" "${CALLGRIND[@]}" "$SERVER" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_REDIS" --limits "$WORK/limits.toml" --workers 1 --redis "redis://127.0.0.1:$P_RDS/"
  REDIS_PID=$LAST
  # The anchor on Redis: the bare server running the script once per request, through a
  # lane of its own as ratelab-server's (crates/server/examples/bare.rs).
  P_RBARE=$(free_port)
  start "$P_RBARE" "${CALLGRIND[@]}" "$BIN/examples/bare" "127.0.0.1:$P_RBARE" 1 "redis://127.0.0.1:$P_RDS/"
  RBARE_PID=$LAST
fi

[ -n "${RATELAB_SERVER:-}" ] && BUILD="ratelab-server $RATELAB_SERVER, the anchors' $BUILD"
echo "User-space instructions per request (callgrind), wrk -t1 -c$CONNS -d${SECS}s, $BUILD build, $(date -u +%F)"
printf "| %-27s | %-5s | %12s | %14s | %13s | %13s |\n" target keys "instr/req" "atomic ops/req" "I1 miss/req" "D1 miss/req"
printf "|%s|%s|%s|%s|%s|%s|\n" "-----------------------------" "-------" "-------------:" "---------------:" "--------------:" "--------------:"
declare -A INSTR ATOM MISS
# measure NAME PORT PID KEYS BINARY: INSTR[NAME/KEYS], ATOM[NAME/KEYS] and MISS[NAME/KEYS].
measure_one() {
  INSTR[$1/$4]=$(per_request "$2" "$3" "$4" "$5")
  ATOM[$1/$4]=$(cat "$WORK/atomics")
  MISS[$1/$4]=$(cat "$WORK/misses")
}
row() { # label, name, keys
  local misses
  read -ra misses <<< "${MISS[$2/$3]}"
  printf "| %-27s | %-5s | %12s | %14s | %13s | %13s |\n" "$1" "$3" "${INSTR[$2/$3]}" "${ATOM[$2/$3]}" "${misses[0]}" "${misses[1]}"
}
for keys in hot many; do
  measure_one bare "$P_BARE" "$BARE_PID" $keys "$BIN/examples/bare"
  measure_one mem "$P_MEM" "$MEM_PID" $keys "$SERVER"
  row "bare front (no limiting)" bare $keys
  row "ratelab-server, in memory" mem $keys
  if [ -n "$REDIS_PID" ]; then
    measure_one rbare "$P_RBARE" "$RBARE_PID" $keys "$BIN/examples/bare"
    measure_one redis "$P_REDIS" "$REDIS_PID" $keys "$SERVER"
    [ "$keys" = hot ] && cp "$WORK/last.cg" "$WORK/redis-hot.cg" && cp "$WORK/last.n" "$WORK/redis-hot.n"
    row "bare front, one script call" rbare $keys
    row "ratelab-server, on Redis" redis $keys
  fi
done
echo
for keys in hot many; do
  b=${INSTR[bare/$keys]} m=${INSTR[mem/$keys]}
  echo "$keys: ratelab in memory / bare = $(python3 -c "print(f'{$m / $b:.2f}')"); the limiter's own: $((m - b)) instructions per request"
  if [ -n "$REDIS_PID" ]; then
    r=${INSTR[redis/$keys]}
    echo "$keys: ratelab on Redis - in memory = $((r - m)) instructions per request (the Redis client's)"
    rb=${INSTR[rbare/$keys]}
    echo "$keys: bare with one script call - bare = $((rb - b)) instructions per request (one call on the connection, alone)"
    echo "$keys: ratelab on Redis - bare with one script call = $((r - rb)) instructions per request (the limiter's own, on Redis)"
  fi
done
if [ -n "$REDIS_PID" ]; then
  echo
  echo "Where ratelab-server's instructions go on Redis, hot key (inclusive, per request):"
  python3 scripts/callgrind-parts.py "$WORK/redis-hot.cg" "$(cat "$WORK/redis-hot.n")"
fi
