#!/usr/bin/env bash
# What each channel design costs against vanilla: events, wall time and peak memory of
# toy (its first 10 simulated minutes) and imux-small (its 15) under every `tor.channel`,
# one thread. Rounds are interleaved (every design once per round, vanilla first), so a
# shared machine's drift falls on all designs alike; each round's wall time is divided by
# that round's vanilla. Prints one Markdown table per scenario: events (exact), median
# wall time, the ratio of the medians, the per-round ratios with their median (the two
# medians part where the machine's speed changed during a round) and the largest peak RSS.
#
# Usage: scripts/design-cost.sh [ROUNDS] [BINARY]
#   ROUNDS  interleaved rounds (default 3)
#   BINARY  the onionlab to measure (default: target/release/onionlab, built first)
# TOY_STOP and IMUX_STOP shorten the runs (e.g. TOY_STOP=1m IMUX_STOP=1m for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=${2:-}
if [ -z "$bin" ]; then
    cargo build --release -q -p onionlab
    bin=target/release/onionlab
fi
toy_stop=${TOY_STOP:-10m} imux_stop=${IMUX_STOP:-15m}
designs="vanilla torchestra torchestra_ideal pctcp imux quic"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# toy has no `tor:` section: one is added. imux-small names its channel on its own line.
for d in $designs; do
    { cat examples/toy.yaml; echo "tor: { channel: $d }"; } > "$out/toy-$d.yaml"
    sed "s/^  channel: vanilla$/  channel: $d/" examples/imux-small.yaml > "$out/imux-small-$d.yaml"
    grep -q "^  channel: $d$" "$out/imux-small-$d.yaml" || {
        echo "design-cost: examples/imux-small.yaml no longer names its channel as '  channel: vanilla'" >&2
        exit 2
    }
done

for i in $(seq "$rounds"); do
    for scenario in "toy:$toy_stop" "imux-small:$imux_stop"; do
        name=${scenario%%:*} stop=${scenario##*:}
        for d in $designs; do
            "$bin" run "$out/$name-$d.yaml" --stop-time "$stop" --threads 1 --quiet --no-report \
                -o "$out/runs/$name-$d-$i" > /dev/null
            echo "round $i: $name $d done" >&2
        done
    done
done

python3 - "$out/runs" "$rounds" "$designs" "$toy_stop" "$imux_stop" <<'PY'
import json, statistics, sys
runs, rounds, designs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
for name, stop in (("toy", sys.argv[4]), ("imux-small", sys.argv[5])):
    def load(d, i):
        return json.load(open(f"{runs}/{name}-{d}-{i}/run.json"))
    base = [load("vanilla", i)["wall_seconds"] for i in range(1, rounds + 1)]
    base_events = load("vanilla", 1)["events"]
    print(f"\n{name}, {stop} simulated, 1 thread, {rounds} interleaved rounds\n")
    print("| design | events | events against vanilla | median wall | wall against vanilla (medians) | per-round ratios (median) | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for d in designs:
        rs = [load(d, i) for i in range(1, rounds + 1)]
        events = {r["events"] for r in rs}
        assert len(events) == 1, f"{name} {d}: event counts differ between rounds: {events}"
        walls = [r["wall_seconds"] for r in rs]
        ratio = statistics.median(walls) / statistics.median(base)
        ratios = [w / b for w, b in zip(walls, base)]
        per_round = ", ".join(f"{r:.2f}" for r in ratios) + f" ({statistics.median(ratios):.2f})"
        rss = max(r["peak_rss_bytes"] for r in rs) / 2**20
        n = events.pop()
        print(f"| {d} | {n:,} | {n / base_events:.2f} | {statistics.median(walls):.1f} s | {ratio:.2f} | "
              f"{'' if d == 'vanilla' else per_round} | {rss:.0f} MiB |")
PY
