#!/usr/bin/env bash
# The sizes of the futures one request runs through in ratelab-server, outermost first: the
# HTTP front's service call (answering `ok`, as the benches do) down to the store call, on
# Redis (`RedisPolicy`) and in memory (`SharedClient`). A future is as large as its largest
# state and is copied whole each time it is moved (into its caller's future, into hyper's
# slot for the request), so its size is paid per request. Read from rustc's own layouts
# (`-Zprint-type-sizes`, a nightly flag that RUSTC_BOOTSTRAP lets the stable compiler take):
# builds the server's library once more with the release profile.
#
#   scripts/future-sizes.sh [LAYOUTS]   (LAYOUTS: a saved -Zprint-type-sizes output instead)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then
  out=$1
else
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  touch crates/server/src/lib.rs
  RUSTC_BOOTSTRAP=1 cargo rustc -q --release -p ratelab-server --lib -- -Zprint-type-sizes > "$out" 2>/dev/null
fi
python3 - "$out" <<'PY'
import re, sys
steps = [
    ("the front's service call (`Front::call`)", r"^async block@<ratelab_gateway::front::Front<{c}, ratelab_gateway::http::TokioEnv, tower::util::ServiceFn<\{{closure@ratelab_gateway::http::answer_ok<hyper::body::Incoming>::\{{closure#0\}}\}}>> as hyper::service::Service<.*>::call::\{{closure#1\}}$"),
    ("`RateLimitLayer::limited`", r"^async fn body of ratelab_gateway::http::RateLimitLayer<{c}, ratelab_gateway::http::TokioEnv>::limited<hyper::body::Incoming, tower::util::ServiceFn<\{{closure@ratelab_gateway::http::answer_ok"),
    ("`Gateway::check`", r"^async fn body of ratelab_gateway::Gateway<{c}, ratelab_gateway::http::TokioEnv>::check\(\)"),
    ("`Gateway::decide`", r"^async fn body of ratelab_gateway::Gateway<{c}, ratelab_gateway::http::TokioEnv>::decide\(\)"),
    ("`Gateway::decide_planned`", r"^async fn body of ratelab_gateway::Gateway<{c}, ratelab_gateway::http::TokioEnv>::decide_planned\(\)"),
    ("`Gateway::run_limits`", r"^async fn body of ratelab_gateway::Gateway<{c}, ratelab_gateway::http::TokioEnv>::run_limits\(\)"),
    ("`Gateway::run_layer`", r"^async fn body of ratelab_gateway::pipeline::layer::<impl ratelab_gateway::Gateway<{c}, ratelab_gateway::http::TokioEnv>>::run_layer\(\)"),
    ("`decide_remote` (the store call)", r"^async fn body of ratelab_store::decide_remote<{c}>\(\)"),
]
clients = [("on Redis", re.escape("ratelab_store::redis_policy::RedisPolicy")),
           ("in memory", re.escape("ratelab_store::SharedClient<ratelab_core::Policy, fn() -> ratelab_core::Nanos>"))]
sizes = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"print-type-size type: `\{(.*)\}`: (\d+) bytes", line)
    if m:
        sizes[m.group(1)] = max(sizes.get(m.group(1), 0), int(m.group(2)))
print("| future of one request | on Redis, bytes | in memory, bytes |")
print("|---|---:|---:|")
for name, pattern in steps:
    row = []
    for _, c in clients:
        p = re.compile(pattern.format(c=c))
        found = [n for t, n in sizes.items() if p.search(t)]
        row.append(str(max(found)) if found else "–")
    print(f"| {name} | {row[0]} | {row[1]} |")
PY
