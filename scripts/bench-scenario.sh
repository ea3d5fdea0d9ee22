#!/usr/bin/env bash
# Whole-scenario benchmark: runs SCENARIO for STOP simulated time on 1 and 2 threads,
# interleaved, RUNS times, and prints each run's figures from run.json and the medians.
# Usage: scripts/bench-scenario.sh SCENARIO STOP [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=$1 stop=$2 runs=${3:-3}
cargo build --release -q -p onionlab
out=$(mktemp -d)
for i in $(seq "$runs"); do
    for t in 1 2; do
        target/release/onionlab run "$scenario" --stop-time "$stop" --threads "$t" --quiet \
            -o "$out/$i-$t" > /dev/null
        python3 - "$out/$i-$t/run.json" "$i" "$t" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"run={sys.argv[2]} threads={sys.argv[3]} wall_s={r['wall_seconds']:.1f} "
      f"speed={r['speed']:.2f} events={r['events']} events_per_sec={r['events_per_sec']:.0f} "
      f"peak_rss_mib={r['peak_rss_bytes']/2**20:.0f}")
PY
    done
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
for t in (1, 2):
    rs = [json.load(open(f"{out}/{i}-{t}/run.json")) for i in range(1, runs + 1)]
    print(f"threads={t} median_wall_s={statistics.median(r['wall_seconds'] for r in rs):.1f} "
          f"median_speed={statistics.median(r['speed'] for r in rs):.2f} "
          f"median_events_per_sec={statistics.median(r['events_per_sec'] for r in rs):.0f} "
          f"max_peak_rss_mib={max(r['peak_rss_bytes'] for r in rs)/2**20:.0f}")
w1 = statistics.median(json.load(open(f"{out}/{i}-1/run.json"))['wall_seconds'] for i in range(1, runs + 1))
w2 = statistics.median(json.load(open(f"{out}/{i}-2/run.json"))['wall_seconds'] for i in range(1, runs + 1))
print(f"speedup_2_threads={w1 / w2:.2f}")
PY
rm -rf "$out"
