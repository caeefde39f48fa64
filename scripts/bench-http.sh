#!/usr/bin/env bash
# HTTP throughput, side by side in one run: wrk against a bare server (the same HTTP front
# stack with no limiting: the anchor), ratelab-server in memory, nginx limit_req (when
# installed) enforcing the same policy, and ratelab-server on a private Redis next to
# redis-benchmark running the same Lua script at the same concurrency and to the bare server
# on the same Redis (each request runs the script once, through a lane of its own as
# ratelab-server's, and is answered ok: the anchor on Redis). On one hot key and on 10 000 keys. Prints one table and
# the ratios: of requests per second, and on Redis of ratelab-server's CPU per request to its
# anchor's (from CPU times per request to two decimals; /proc counts 10 ms ticks, about 0.5 %
# of a 5 s round's CPU time on Redis, so the third decimal is not significant).
#
#   scripts/bench-http.sh [SECONDS] [CONNECTIONS] [WORKERS] [ROUNDS]
#
# (defaults: 5 s, 32 connections, 1 worker thread for each server: wrk takes a core of its own,
# and nginx runs one worker process; 3 rounds). Each round measures every target once, in
# turn, so a slow spell of the machine falls on all of them alike; each row is the round with
# the median throughput.
#
# Needs wrk; nginx and redis-server are used when installed. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-5}"
CONNS="${2:-32}"
WORKERS="${3:-1}"
ROUNDS="${4:-3}"
command -v wrk >/dev/null || { echo "wrk is not installed (Debian: apt-get install wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is not installed" >&2; exit 2; }
NGINX="$(command -v nginx || true)"; [ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx

. scripts/bench-lib.sh
build_server bare

# The policy and the load every target gets (scripts/bench-lib.sh).
write_http_load


# The process serving each port, whose CPU per request is measured.
declare -A PID_OF
P_BARE=$(free_port); start "$P_BARE" "$BIN/examples/bare" "127.0.0.1:$P_BARE" "$WORKERS"; PID_OF[$P_BARE]=$LAST
P_MEM=$(free_port); start "$P_MEM" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_MEM" --limits "$WORK/limits.toml" --workers "$WORKERS"; PID_OF[$P_MEM]=$LAST
if [ -n "$NGINX" ]; then
  P_NGX=$(free_port)
  mkdir -p "$WORK/nginx" "$WORK/www"
  echo ok > "$WORK/www/ok"
  chmod a+rx "$WORK" "$WORK/www"; chmod a+r "$WORK/www/ok"  # nginx run as root serves as nobody
  # nginx answers with a static file held in its open-file cache: a `return` would answer in
  # the rewrite phase, before limit_req runs, and nothing would be limited. /tight has the
  # same shape at one request a minute, to show that limit_req runs in it.
  cat > "$WORK/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $WORK/nginx/pid;
error_log $WORK/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  open_file_cache max=16 inactive=60s; open_file_cache_valid 60s;
  client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx; fastcgi_temp_path $WORK/nginx;
  uwsgi_temp_path $WORK/nginx; scgi_temp_path $WORK/nginx;
  limit_req_zone \$http_x_api_key zone=k:64m rate=1000000r/s;
  limit_req_zone \$http_x_api_key zone=tight:1m rate=1r/m;
  server {
    listen 127.0.0.1:$P_NGX;
    root $WORK/www;
    location / { limit_req zone=k burst=1000000 nodelay; limit_req_status 429; try_files /ok =404; }
    location /tight { limit_req zone=tight nodelay; limit_req_status 429; try_files /ok =404; }
  }
}
EOF
  start "$P_NGX" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK/nginx"; PID_OF[$P_NGX]=$LAST
  codes=$(for _ in 1 2; do curl -s -o /dev/null -w "%{http_code} " -H "x-api-key: probe" "http://127.0.0.1:$P_NGX/tight"; done)
  [ "$codes" = "200 429 " ] || { echo "nginx limit_req is not in the answer's path (/tight answered: $codes)" >&2; cat "$WORK/nginx/error.log" >&2; exit 1; }
fi
REDIS_URL=""
if command -v redis-server >/dev/null; then
  for tool in redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install redis-tools)" >&2; exit 2; }
  done
  start_redis
  REDIS_URL="redis://127.0.0.1:$P_RDS"
  P_RMEM=$(free_port); start "$P_RMEM" "$BIN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$P_RMEM" --limits "$WORK/limits.toml" --redis "$REDIS_URL" --workers "$WORKERS"; PID_OF[$P_RMEM]=$LAST
  P_RBARE=$(free_port); start "$P_RBARE" "$BIN/examples/bare" "127.0.0.1:$P_RBARE" "$WORKERS" "$REDIS_URL"; PID_OF[$P_RBARE]=$LAST
  # The anchor on Redis runs the script: one request, one more call in INFO commandstats.
  calls() { redis-cli -p "$P_RDS" INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p'; }
  c0=$(calls)
  code=$(curl -s -o /dev/null -w "%{http_code}" -H "x-api-key: probe" "http://127.0.0.1:$P_RBARE/")
  c1=$(calls)
  [ "$code" = 200 ] && [ "$((${c1:-0} - ${c0:-0}))" = 1 ] \
    || { echo "the bare front on Redis did not run the script once (answered $code):" >&2; cat "$WORK/$P_RBARE.log" >&2; exit 1; }
fi

# redis-benchmark running ratelab's own script (the atomic decision) at the same concurrency.
redis_benchmark() { # keys
  local sha range=() r0 r1 n=$((SECS * 60000)) out
  sha=$(redis-cli -p "$P_RDS" SCRIPT LOAD "$(cat crates/store/src/token_bucket.lua)")
  [ "$1" = many ] && range=(-r 10000)
  r0=$(cpu "$PID_REDIS")
  out=$(redis-benchmark -p "$P_RDS" -c "$CONNS" -n "$n" "${range[@]}" -q --csv \
    EVALSHA "$sha" 1 "bench:key:__rand_int__" 1000000 1000000 1000000000 1 "" "")
  r1=$(cpu "$PID_REDIS")
  python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
r = rows[-1]
rps, p50, p99 = (float(r[k]) for k in ("rps", "p50_latency_ms", "p99_latency_ms"))
print(f"{rps:.0f} {p50 * 1000:.0f} {p99 * 1000:.0f} – {sys.argv[1]}")' "$(us_per $((r1 - r0)) "$n")" <<< "$out"
}

echo "HTTP throughput, wrk -t1 -c$CONNS -d${SECS}s, $WORKERS worker thread(s) per server, $(nproc) cores, median of $ROUNDS rounds, $BUILD build, $(date -u +%F)"
printf "| %-34s | %-8s | %10s | %7s | %7s | %10s | %10s |\n" target keys "req/s" "p50 µs" "p99 µs" "server CPU µs/req" "Redis CPU µs/req"
printf "|%s|%s|%s|%s|%s|%s|%s|\n" "------------------------------------" "----------" "-----------:" "--------:" "--------:" "-----------:" "-----------:"
declare -A RPS RUNS
ORDER=()
take() { # label, keys, command... (printing "rps p50 p99 server_cpu redis_cpu"); a failed measurement ends the run
  local label="$1" keys="$2" out
  shift 2
  out=$("$@") || { echo "refused: $label, $keys" >&2; exit 1; }
  [ -n "${RUNS["$label/$keys"]:-}" ] || ORDER+=("$label/$keys")
  RUNS["$label/$keys"]+="$out;"
}
for keys in hot many; do
  for _ in $(seq "$ROUNDS"); do
    take "bare front (no limiting)" $keys measure "$P_BARE" $keys
    take "ratelab-server, in memory" $keys measure "$P_MEM" $keys
    if [ -n "$NGINX" ]; then take "nginx limit_req (1 worker)" $keys measure "$P_NGX" $keys; fi
    if [ -n "$REDIS_URL" ]; then
      take "bare front, one script call" $keys measure "$P_RBARE" $keys redis
      take "ratelab-server, on Redis" $keys measure "$P_RMEM" $keys redis
      take "redis-benchmark, same script" $keys redis_benchmark $keys
    fi
  done
done
for entry in "${ORDER[@]}"; do
  read -r r p50 p99 scpu rcpu < <(python3 -c '
import sys
runs = sorted((r.split() for r in sys.argv[1].split(";") if r), key=lambda t: float(t[0]))
print(*runs[len(runs) // 2])' "${RUNS[$entry]}")
  RPS["$entry"]=$r
  printf "| %-34s | %-8s | %10s | %7s | %7s | %10s | %10s |\n" "${entry%/*}" "${entry##*/}" "$r" "$p50" "$p99" "$scpu" "$rcpu"
done
echo
# The ratio of the two rows' medians, and the median of the rounds' own ratios (each round
# measures both targets back to back, so a slow spell of the machine falls on both) with
# their range.
ratio() { # label A, label B (each with /keys)
  python3 - "$(round_ratios "${RUNS[$2]}" "${RUNS[$1]}")" "${RPS[$1]}" "${RPS[$2]}" <<'EOF'
import sys
per_round = [float(r) for r in sys.argv[1].split()]
# The same median as the rows': the middle one, the upper of two.
print(f"{float(sys.argv[2]) / float(sys.argv[3]):.2f} (rounds: median "
      f"{per_round[len(per_round) // 2]:.2f}, {per_round[0]:.2f}-{per_round[-1]:.2f})")
EOF
}
# The server CPU per request of A over B's: of the two rows (each its median-throughput round),
# and the median of the rounds' own ratios with their range.
cpu_ratio() { # label A, label B (each with /keys)
  python3 - "${RUNS[$1]}" "${RUNS[$2]}" <<'EOF'
import sys
rounds = lambda runs: [r.split() for r in runs.split(";") if r]
def row(runs):
    by_rps = sorted(rounds(runs), key=lambda t: float(t[0]))
    return float(by_rps[len(by_rps) // 2][3])
a, b = sys.argv[1], sys.argv[2]
per_round = sorted(float(x[3]) / float(y[3]) for x, y in zip(rounds(a), rounds(b)))
print(f"{row(a) / row(b):.3f} (rounds: median {per_round[len(per_round) // 2]:.3f}, "
      f"{per_round[0]:.3f}-{per_round[-1]:.3f})")
EOF
}
for keys in hot many; do
  echo "$keys: ratelab in memory / bare = $(ratio "ratelab-server, in memory/$keys" "bare front (no limiting)/$keys")"
  if [ -n "$NGINX" ]; then
    echo "$keys: ratelab in memory / nginx limit_req = $(ratio "ratelab-server, in memory/$keys" "nginx limit_req (1 worker)/$keys")"
  fi
  if [ -n "$REDIS_URL" ]; then
    echo "$keys: ratelab on Redis / redis-benchmark = $(ratio "ratelab-server, on Redis/$keys" "redis-benchmark, same script/$keys")"
    echo "$keys: bare front with one script call / redis-benchmark = $(ratio "bare front, one script call/$keys" "redis-benchmark, same script/$keys")"
    echo "$keys: ratelab on Redis / bare front with one script call = $(ratio "ratelab-server, on Redis/$keys" "bare front, one script call/$keys")"
    echo "$keys: server CPU per request, ratelab on Redis / bare front with one script call = $(cpu_ratio "ratelab-server, on Redis/$keys" "bare front, one script call/$keys")"
  fi
done
