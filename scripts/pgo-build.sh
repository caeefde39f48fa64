#!/usr/bin/env bash
# ratelab-server and the HTTP benches' anchor (the bare front) built with profile-guided
# optimisation, alike: the
# production profile (Cargo.toml), first instrumented, then trained, then built again with
# what the training counted. Both binaries come from one training run and one profile, so a
# bench comparing them compares two builds made the same way.
#
#   scripts/pgo-build.sh
#
# Prints the directory of the optimised binaries (ratelab-server, examples/bare) as its
# last line; `RATELAB_PGO=1 scripts/bench-http.sh …` (and the other benches that build through
# scripts/bench-lib.sh) uses it. The training, on loopback, a few seconds per load:
#   - the HTTP benches' load (one token bucket per x-api-key, all admitted), one hot key and
#     10 000 keys, on ratelab-server in memory and on the anchor;
#   - docs/limits.example.toml (a per-IP and a per-key bucket together, a sliding window and a
#     shadow limit on routes the load does not take), where most requests are denied;
#   - with redis-server installed, each of those again on a private Redis, and the anchor with
#     its one script call per request.
# A training run is kept with the instrumented binaries it ran (their hashes): run again on
# unchanged code, the script builds nothing new and trains no more.
#
# Needs wrk, and rustup's llvm-tools component (`rustup component add llvm-tools`) for
# llvm-profdata of rustc's own LLVM.
set -euo pipefail
cd "$(dirname "$0")/.."
EXAMPLE=bare
command -v wrk >/dev/null || { echo "wrk is not installed (Debian: apt-get install wrk)" >&2; exit 2; }
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"
[ -x "$PROFDATA" ] || { echo "llvm-profdata is not installed for this toolchain (rustup component add llvm-tools)" >&2; exit 2; }

. scripts/bench-lib.sh
TARGET="${CARGO_TARGET_DIR:-target}"
PGO="$(realpath -m "$TARGET/pgo")"
mkdir -p "$PGO"
# RUSTFLAGS replaces the workspace's flags (.cargo/config.toml): `--cfg madsim` is kept, so
# that these builds compile the same code as `build_server`'s.
build() { # target dir, extra rustc flag
  CARGO_TARGET_DIR="$1" RUSTFLAGS="--cfg madsim $2" \
    cargo build --profile production -q -p ratelab-server --bin ratelab-server --example "$EXAMPLE" >&2
}
echo "pgo: building the instrumented binaries" >&2
build "$PGO/gen" "-Cprofile-generate=$PGO/raw"
GEN="$PGO/gen/production"
TRAINED_ON=$(sha256sum "$GEN/ratelab-server" "$GEN/examples/$EXAMPLE" | awk '{print $1}' | sha256sum | cut -c1-16)

if [ ! -s "$PGO/$TRAINED_ON.profdata" ]; then
  echo "pgo: training" >&2
  rm -rf "$PGO/raw"
  # The benches' own one-limit load, whatever the caller's BENCH_LIMITS: the profile is
  # kept by the binaries' hashes alone.
  BENCH_LIMITS=one write_http_load
  cp docs/limits.example.toml "$WORK/example.toml"
  # The load on PORT, hot and many keys, a few seconds each; what it answers is not read.
  train() {
    wrk -t1 -c32 -d3s -H "x-api-key: hot" "http://127.0.0.1:$1/" > /dev/null
    wrk -t1 -c32 -d3s -s "$WORK/many.lua" "http://127.0.0.1:$1/" > /dev/null
  }
  STORES=("")
  if command -v redis-server >/dev/null; then
    start_redis
    STORES+=("redis://127.0.0.1:$P_RDS")
  else
    echo "pgo: redis-server is not installed: trained in memory only" >&2
  fi
  TRAINED=()
  for url in "${STORES[@]}"; do
    redis=(); [ -n "$url" ] && redis=(--redis "$url")
    p=$(free_port); start "$p" "$GEN/examples/$EXAMPLE" "127.0.0.1:$p" 1 ${url:+"$url"}; TRAINED+=("$LAST"); train "$p"
    for limits in limits.toml example.toml; do
      p=$(free_port)
      start "$p" "$GEN/ratelab-server" --admin-listen 127.0.0.1:0 --listen "127.0.0.1:$p" \
        --limits "$WORK/$limits" --workers 1 ${redis[@]+"${redis[@]}"}
      TRAINED+=("$LAST"); train "$p"
    done
  done
  # Each stops as on SIGTERM, returning from main: the profile is written at exit.
  for p in "${TRAINED[@]}"; do kill -TERM "$p" || true; done
  for p in "${TRAINED[@]}"; do
    wait "$p" || { echo "pgo: a trained server exited with $? (its log: $WORK)" >&2; exit 1; }
  done
  "$PROFDATA" merge -o "$PGO/$TRAINED_ON.profdata.part" "$PGO"/raw/*.profraw
  mv "$PGO/$TRAINED_ON.profdata.part" "$PGO/$TRAINED_ON.profdata"
fi

echo "pgo: building with the profile $PGO/$TRAINED_ON.profdata" >&2
build "$PGO/use" "-Cprofile-use=$PGO/$TRAINED_ON.profdata"
echo "$PGO/use/production"
