#!/usr/bin/env bash
# Measures issue 15's two-core floors for one or more onionlab binaries, interleaved: per round
# and binary, the whole web-6876 run (6,876 relays, 4 simulated minutes) and then toy for 10
# simulated minutes, both on 2 threads; prints wall seconds, speed, events per second and
# peak RSS from each run.json, and toy's events per second over web-6876's (floor: ≤ 1.5;
# web-6876's floor: ≥ 2× real time in ≤ 1.5 GiB).
#
# Usage: scripts/floors.sh ROUNDS BIN...   e.g. scripts/floors.sh 2 target/release/onionlab
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
rounds=$1
shift
# The binaries as absolute paths, since the runs start from the repository's root.
bins=()
for bin in "$@"; do
    bins+=("$(realpath "$bin")")
done
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    for bin in "${bins[@]}"; do
        "$bin" run examples/web-6876.yaml -o "$out/web" --force --stop-time 4m --threads 2 \
            --quiet --no-report > /dev/null 2>&1
        "$bin" run toy -o "$out/toy" --force --stop-time 10m --threads 2 --quiet --no-report \
            > /dev/null 2>&1
        python3 - "$out" "$r" "$bin" <<'PY'
import json, sys
out, r, bin = sys.argv[1:]
web, toy = (json.load(open(f"{out}/{s}/run.json")) for s in ("web", "toy"))
for name, j in (("web-6876", web), ("toy", toy)):
    print(f"round {r} {bin} {name}: {j['wall_seconds']:.2f} s wall, {j['speed']:.2f}x real "
          f"time, {j['events_per_sec'] / 1e6:.3f} M events/s ({j['events']} events), peak RSS "
          f"{j['peak_rss_bytes'] / 1e6:.0f} MB, complete {j['complete']}")
print(f"round {r} {bin} toy / web-6876 events per second: "
      f"{toy['events_per_sec'] / web['events_per_sec']:.2f}")
PY
    done
done
