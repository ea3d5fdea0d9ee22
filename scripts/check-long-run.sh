#!/usr/bin/env bash
# Checks scripts/long-run.sh on this machine: runs the toy network once straight through and
# once paused to disk and resumed (twice), and compares the results byte for byte. Needs what
# long-run.sh needs (root, CRIU 4.0 or newer, `unshare --time`), so it is not part of the test
# suite; run it before relying on pause and resume on a new machine or kernel.
#
# Usage: scripts/check-long-run.sh [STOP]   (STOP: simulated time, default 30m)
# Environment: BIN (an onionlab binary; default: build target/release/onionlab), CRIU.
set -euo pipefail
cd "$(dirname "$0")/.."
stop=${1:-30m}
if [ -n "${BIN:-}" ]; then
    bin=$BIN
else
    cargo build --release --quiet
    bin=$PWD/target/release/onionlab
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(run examples/toy.yaml --force --stop-time "$stop" --threads 2 --quiet --no-report)

"$bin" "${args[@]}" -o "$work/straight" > /dev/null
echo "straight run: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['wall_seconds'],1), 's')" "$work/straight/run.json")"

lr=scripts/long-run.sh
$lr start "$work/state" -- "$bin" "${args[@]}" -o "$work/paused" > /dev/null
running() { local s; s=$($lr status "$work/state"); [[ $s == running* ]]; }
for leg in 1 2; do
    sleep 5
    if ! running; then
        echo "check-long-run: the run ended before pause $leg; give a longer STOP" >&2
        exit 1
    fi
    $lr pause "$work/state" > /dev/null
    sleep 3
    $lr resume "$work/state" > /dev/null
done
while running; do sleep 2; done
$lr status "$work/state"

ok=1
for f in downloads.csv circuits.csv relays.csv summary.txt; do
    if cmp -s "$work/straight/$f" "$work/paused/$f"; then
        echo "identical: $f"
    else
        echo "DIFFERS: $f"
        ok=0
    fi
done
[ $ok = 1 ] && echo "check-long-run: paused and resumed twice, results byte-identical"
[ $ok = 1 ]
