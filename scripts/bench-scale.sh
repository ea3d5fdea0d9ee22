#!/usr/bin/env bash
# Scale benchmark: the 1%, 10% and full networks of examples/ (net-1pct, net-10pct, net-full).
#
# Part 1, per size: RUNS runs on 2 threads; prints wall time per simulated minute (over the
# whole run and over the part after bootstrap, from run.json's progress samples), events per
# second, events per simulated second over the last 10 simulated seconds (what a simulated
# second of the loaded network costs, from run.json's state samples), peak memory and relay
# goodput, and their medians.
# Part 2, the full network's thread scaling: 1 thread, 2 threads with work stealing, 2
# threads without it and 2 threads without spans (every host round by round; plus any THREADS
# given, e.g. 4 8 16 on a bigger machine, with and without stealing), interleaved RUNS times
# so that drifting machine load hits every configuration alike; prints median wall times and
# their ratios to 1 thread.
#
# Usage: scripts/bench-scale.sh [STOP] [RUNS] [THREADS...]
#   STOP: simulated stop time for every run (default: each scenario's own stop_time)
#   RUNS: repetitions (default 3)
# Environment: SIZES (default "1pct 10pct full"), SCALING (default "full"; empty skips part 2),
#   OUT (keep the runs' output there instead of a temporary directory), BIN (an onionlab binary
#   to run instead of building target/release/onionlab, e.g. on a machine without Rust).
set -euo pipefail
cd "$(dirname "$0")/.."
stop=${1:-} runs=${2:-3}
shift $(($# > 2 ? 2 : $#))
extra=("$@")
sizes=${SIZES-1pct 10pct full}
scaling=${SCALING-full}
if [ -n "${BIN:-}" ]; then
    bin=$BIN
else
    cargo build --release -q -p onionlab
    bin=target/release/onionlab
fi
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/2^20}' /proc/meminfo)," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# run NAME SCENARIO THREADS [FLAGS...]: one run into $out/NAME, then one line of its figures.
run() {
    local name=$1 scenario=$2 threads=$3
    shift 3
    local args=(run "$scenario" -o "$out/$name" --force --threads "$threads" --quiet --no-report)
    [ -n "$stop" ] && args+=(--stop-time "$stop")
    "$bin" "${args[@]}" "$@" > /dev/null
    python3 scripts/bench_scale_figures.py line "$out/$name" "$name"
}

for size in $sizes; do
    for i in $(seq "$runs"); do
        run "$size-2-$i" "examples/net-$size.yaml" 2
    done
done
if [ -n "$sizes" ]; then
    python3 scripts/bench_scale_figures.py sizes "$out" "$runs" $sizes
fi

if [ -n "$scaling" ]; then
    configs=("1" "2" "2 --no-work-stealing" "2 --no-spans")
    for t in "${extra[@]}"; do
        configs+=("$t" "$t --no-work-stealing")
    done
    for i in $(seq "$runs"); do
        for c in "${configs[@]}"; do
            read -r t flag <<< "$c"
            name="scaling-$t${flag:+-${flag#--no-}}-$i"
            run "$name" "examples/net-$scaling.yaml" "$t" ${flag:+$flag}
        done
    done
    python3 scripts/bench_scale_figures.py scaling "$out" "$runs" "${configs[@]}"
fi
[ -z "${OUT:-}" ] && rm -rf "$out"
exit 0
