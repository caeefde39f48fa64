# What the bench scripts share (sourced, not run): a work directory removed at exit with
# every process started in it, free loopback ports, and starting a server on one.
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in ${PIDS[@]+"${PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing listens on $1:" >&2; cat "$WORK/$1.log" >&2; exit 1; }
# CPU time of a process so far, in clock ticks; tree_cpu adds its children's (nginx's worker).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
command -v pgrep >/dev/null || { echo "pgrep is not installed (Debian: apt-get install procps)" >&2; exit 2; }
tree_cpu() { local t; t=$(cpu "$1"); for c in $(pgrep -P "$1" || true); do t=$((t + $(cpu "$c"))); done; echo "$t"; }
# µs of CPU per request: clock ticks ($1) over requests ($2).
us_per() { python3 -c "import os; print(f'{$1 * 1e6 / os.sysconf(\"SC_CLK_TCK\") / $2:.1f}')"; }

# start PORT COMMAND...: runs COMMAND (its output in $WORK/PORT.log), its pid in LAST, and
# waits until something listens on PORT.
start() {
  local port="$1"; shift
  "$@" > "$WORK/$port.log" 2>&1 &
  PIDS+=($!)
  LAST=$!
  wait_port "$port"
}

# The HTTP benches' policy and load (bench-http.sh, instr-http.sh): one token bucket per
# x-api-key, B = R = 1 000 000/s, so every request is admitted and each one is a whole
# decision ($WORK/limits.toml); and a wrk script sending a random one of 10 000 keys per
# request ($WORK/many.lua).
write_http_load() {
  cat > "$WORK/limits.toml" <<EOF
[[limit]]
name = "per-key"
algorithm = "token-bucket"
capacity = 1000000
refill_per_sec = 1000000
key = "api-key"
EOF
  cat > "$WORK/many.lua" <<'EOF'
math.randomseed(7)
request = function()
  return wrk.format(nil, nil, { ["x-api-key"] = "k" .. math.random(10000) })
end
EOF
}
