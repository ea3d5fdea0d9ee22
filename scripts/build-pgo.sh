#!/usr/bin/env bash
# Builds onionlab with profile-guided optimisation, for long runs: a binary that ran web-6876
# 2-6% faster than the plain release build and the toy network 6-10% on a 2-core Xeon VM
# (docs/src/performance.md, "A faster binary for long runs"). Results are byte-identical to the
# plain build's; only speed differs. Designs that none of the runs below uses (PCTCP, the
# other channel designs and schedulers of examples/experiments) are not trained.
#
# Three steps, 6-7 minutes on 2 cores:
#   1. an instrumented release build (target/pgo-gen);
#   2. short runs of built-in scenarios with it, one for each design the examples show (code
#      no training run reaches is optimised for size, so a design left out of the list below
#      may run slower than in the plain build);
#   3. a release build that uses the merged profile (target/pgo).
# The binary is target/pgo/release/onionlab; give it to the benchmark scripts with BIN=.
#
# Needs llvm-profdata of the compiler's own LLVM version: rustup's llvm-tools component,
# which the script installs if rustup can.
#
# Usage: scripts/build-pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "build-pgo: llvm-profdata not found; installing rustup's llvm-tools component" >&2
    if ! rustup component add llvm-tools >&2 || [ ! -x "$profdata" ]; then
        echo "build-pgo: needs $profdata (rustup component add llvm-tools)" >&2
        exit 2
    fi
fi

profiles="$PWD/target/pgo-gen/profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

echo "build-pgo: 1/3 instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$profiles" \
    cargo build --release -p onionlab --target-dir target/pgo-gen

echo "build-pgo: 2/3 training runs" >&2
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
train() {
    local scenario=$1 stop=$2
    target/pgo-gen/release/onionlab run "examples/$scenario.yaml" --stop-time "$stop" \
        --threads 2 --quiet --no-report -o "$runs/$scenario" >/dev/null
}
train toy 2m
train web-6876 30s
train net-1pct 60s
train small 1m
train upload-loss 1m
train quux-loss 1m
train imux-small 1m
train attack-small 1m
train cpu-fidelity 1m

echo "build-pgo: 3/3 optimised build" >&2
"$profdata" merge -o target/pgo-gen/merged.profdata "$profiles"
RUSTFLAGS="-Cprofile-use=$PWD/target/pgo-gen/merged.profdata" \
    cargo build --release -p onionlab --target-dir target/pgo
echo "target/pgo/release/onionlab"
