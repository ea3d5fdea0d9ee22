#!/usr/bin/env bash
# PHOLD on 1 and 2 threads, interleaved so both see the same machine conditions; prints each
# run and the medians and the 2-thread/1-thread ratio of medians.
# Usage: scripts/bench-phold.sh [RUNS] [extra phold args...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
cargo build --release -q -p onionlab-engine --example phold
bin=target/release/examples/phold
declare -a one two
for i in $(seq "$runs"); do
    for t in 1 2; do
        eps=$("$bin" --hosts 10000 --remote 0.1 --threads "$t" --sim-seconds 10 "$@" | tail -1 | cut -d= -f2)
        echo "run=$i threads=$t events_per_sec=$eps"
        if [ "$t" = 1 ]; then one+=("$eps"); else two+=("$eps"); fi
    done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m1=$(median "${one[@]}"); m2=$(median "${two[@]}")
echo "median_1_thread=$m1 median_2_threads=$m2 ratio=$(awk -v a="$m2" -v b="$m1" 'BEGIN{printf "%.3f", a/b}')"
