# What the bench scripts share (sourced, not run): a work directory removed at exit with
# every process started in it, free loopback ports, starting a server on one (and a private
# redis-server), building the server, the HTTP benches' load, measuring one wrk run, and the
# rounds' ratios of two targets.
WORK="$(mktemp -d)"
PIDS=()
# Each process is waited for before the directory goes: one still writing there (valgrind's
# last dump) would leave it behind.
cleanup() {
  for p in ${PIDS[@]+"${PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  for p in ${PIDS[@]+"${PIDS[@]}"}; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing listens on $1:" >&2; cat "$WORK/$1.log" >&2; exit 1; }
# CPU time of a process so far, in clock ticks; tree_cpu adds its children's (nginx's worker).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
command -v pgrep >/dev/null || { echo "pgrep is not installed (Debian: apt-get install procps)" >&2; exit 2; }
tree_cpu() { local t; t=$(cpu "$1"); for c in $(pgrep -P "$1" || true); do t=$((t + $(cpu "$c"))); done; echo "$t"; }
# µs of CPU per request: clock ticks ($1) over requests ($2).
us_per() { python3 -c "import os; print(f'{$1 * 1e6 / os.sysconf(\"SC_CLK_TCK\") / $2:.2f}')"; }

# start PORT COMMAND...: runs COMMAND (its output in $WORK/PORT.log), its pid in LAST, and
# waits until something listens on PORT.
start() {
  local port="$1"; shift
  "$@" > "$WORK/$port.log" 2>&1 &
  PIDS+=($!)
  LAST=$!
  wait_port "$port"
}

# build_server EXAMPLE: builds ratelab-server and the example EXAMPLE (a bench's anchor) with
# the production profile, the server as deployed (Cargo.toml); their directory in BIN, the
# build's name in BUILD. With RATELAB_PGO=1, both are built with profile-guided optimisation
# from one training run (scripts/pgo-build.sh).
build_server() {
  if [ "${RATELAB_PGO:-0}" = 1 ]; then
    [ "$1" = bare ] || { echo "RATELAB_PGO=1: profile-guided builds train the HTTP front and its anchor only" >&2; exit 2; }
    BIN=$(scripts/pgo-build.sh | tail -1)
    BUILD="production, profile-guided (scripts/pgo-build.sh)"
    return
  fi
  cargo build --profile production -q -p ratelab-server --bin ratelab-server --example "$1"
  BIN="${CARGO_TARGET_DIR:-target}/production"
  BUILD="production"
}

# start_redis: a private redis-server, no persistence, on a free port (P_RDS, its pid in
# PID_REDIS).
start_redis() {
  P_RDS=$(free_port)
  start "$P_RDS" redis-server --port "$P_RDS" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK"
  PID_REDIS=$LAST
}

# round_ratios A_RUNS B_RUNS: B / A in each round, sorted, space-separated. Each argument holds
# one target's runs as `measure` prints them, each ended by ";", in round order.
round_ratios() {
  python3 - "$1" "$2" <<'EOF'
import sys
rps = lambda runs: [float(r.split()[0]) for r in runs.split(";") if r]
print(*sorted(b / a for a, b in zip(rps(sys.argv[1]), rps(sys.argv[2]))))
EOF
}

# The HTTP benches' policy and load (bench-http.sh, instr-http.sh, ab-http.sh): one token bucket per
# x-api-key, B = R = 1 000 000/s, so every request is admitted and each one is a whole
# decision ($WORK/limits.toml); and a wrk script sending a random one of 10 000 keys per
# request ($WORK/many.lua). With BENCH_LIMITS=pair, a per-client-address bucket as well, at
# the same rate: every request is decided at both limits together (ratelab-server's default
# pair without a limits file, all or nothing).
write_http_load() {
  cat > "$WORK/limits.toml" <<EOF
[[limit]]
name = "per-key"
algorithm = "token-bucket"
capacity = 1000000
refill_per_sec = 1000000
key = "api-key"
EOF
  case "${BENCH_LIMITS:-one}" in
    one) ;;
    pair) cat >> "$WORK/limits.toml" <<EOF

[[limit]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 1000000
refill_per_sec = 1000000
key = "client-ip"
EOF
      ;;
    *) echo "BENCH_LIMITS=${BENCH_LIMITS}: expected one or pair" >&2; exit 2 ;;
  esac
  # The 10 000 requests are formatted once, when wrk's thread starts, so that each request
  # costs wrk one draw rather than formatting a request: on 2 cores the load generator's own
  # CPU is taken from the servers'.
  cat > "$WORK/many.lua" <<'EOF'
math.randomseed(7)
local requests = {}
init = function()
  for i = 1, 10000 do requests[i] = wrk.format(nil, nil, { ["x-api-key"] = "k" .. i }) end
end
request = function()
  return requests[math.random(10000)]
end
EOF
}

# wrk's Requests/sec and its p50 / p99 latency, and the CPU per request of the server (with
# its children) and of redis-server (on the Redis target, else "–"), in µs (from
# /proc/PID/stat), as "rps p50 p99 server_cpu redis_cpu". Reads CONNS, SECS, PID_OF (the pid
# serving each port), and PID_REDIS when the third argument is `redis` (a server on Redis).
measure() { # port, keys[, redis]
  local extra=(-H "x-api-key: hot") s0 s1 r0=0 r1=0 redis_cpu="–" n
  [ "$2" = many ] && extra=(-s "$WORK/many.lua")
  s0=$(tree_cpu "${PID_OF[$1]}")
  [ "${3:-}" = redis ] && r0=$(cpu "$PID_REDIS")
  wrk -t1 -c"$CONNS" -d"${SECS}s" --latency "${extra[@]}" "http://127.0.0.1:$1/" > "$WORK/wrk.out"
  s1=$(tree_cpu "${PID_OF[$1]}")
  [ "${3:-}" = redis ] && r1=$(cpu "$PID_REDIS")
  if grep -qE "Non-2xx|Socket errors" "$WORK/wrk.out"; then
    echo "refused: non-2xx answers or socket errors from port $1:" >&2; cat "$WORK/wrk.out" >&2; return 1
  fi
  n=$(grep -oE "^ *[0-9]+ requests in" "$WORK/wrk.out" | grep -oE "[0-9]+" || true)
  [ "${n:-0}" -gt 0 ] || { echo "refused: no requests answered on port $1:" >&2; cat "$WORK/wrk.out" >&2; return 1; }
  [ "${3:-}" = redis ] && redis_cpu=$(us_per $((r1 - r0)) "$n")
  python3 - "$WORK/wrk.out" "$(us_per $((s1 - s0)) "$n")" "$redis_cpu" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
def us(v):
    n, u = re.match(r"([\d.]+)(\w+)", v).groups()
    return float(n) * {"us": 1, "ms": 1e3, "s": 1e6}[u]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
p50 = us(re.search(r"\s50%\s+(\S+)", t).group(1))
p99 = us(re.search(r"\s99%\s+(\S+)", t).group(1))
print(f"{rps:.0f} {p50:.0f} {p99:.0f} {sys.argv[2]} {sys.argv[3]}")
EOF
}
