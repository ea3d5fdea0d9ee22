#!/usr/bin/env bash
# Cache misses and instructions per event over a window of simulated time, counted by
# callgrind with a fixed simulated cache: repeatable where wall-clock timings on a shared
# machine are not, so that a layout change worth a few percent can be seen.
#
# The run goes uninstrumented (valgrind's plain translation, a few times slower than native)
# until run.json shows a state sample at FROM simulated seconds, then callgrind counts until
# the run ends at STOP. Per event means per call of NetStack::handle (a packet's arrival or
# delivery, a TCP timer: nine in ten of a Tor network's events), the same normaliser for any
# two binaries that run the same events, whatever instant the counting started at. The
# figures are the engine's worker loop's, inclusive (not the writing of results at the end).
#
# Simulated cache: 32 KiB 8-way L1i, 48 KiB 12-way L1d, 32 MiB 16-way last level, 64-byte
# lines. (valgrind warns that it found the host's L3 and prints "simulated LL cache" with the
# host's size: those lines describe its autodetection, which --LL overrides; with -v it lists
# the "Cache configuration used".) The last level stands for a laptop's L3: a large network's
# state does not fit in it, as it does not in any real cache.
#
# web-6876 from 60 to 68 s (the loaded network, 12 M events) takes about 10 minutes on the
# 2-core VM. Needs valgrind (apt install valgrind).
#
# Usage: scripts/cache-profile.sh BIN OUT [SCENARIO] [FROM] [STOP]
#   BIN: the onionlab binary (a release build; keep its debug info for callgrind_annotate)
#   OUT: callgrind's output file; the run's own output goes to OUT.run/
#   SCENARIO (default examples/web-6876.yaml), FROM (simulated seconds, a multiple of 10,
#   default 60), STOP (default 68s)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | sed '$d'; exit 2; }
bin=$1 out=$2 scenario=${3:-examples/web-6876.yaml} from=${4:-60} stop=${5:-68s}
command -v valgrind > /dev/null || { echo "cache-profile: valgrind is not installed" >&2; exit 2; }
[ -x "$bin" ] || { echo "cache-profile: $bin is not an executable" >&2; exit 2; }
run_dir=$out.run
rm -f "$out"
valgrind --tool=callgrind --instr-atstart=no --cache-sim=yes \
    --I1=32768,8,64 --D1=49152,12,64 --LL=33554432,16,64 \
    --callgrind-out-file="$out" \
    "$bin" run "$scenario" -o "$run_dir" --force --threads 1 --quiet --no-report \
    --stop-time "$stop" > "$out.log" 2>&1 &
pid=$!
reached() {
    python3 - "$run_dir/run.json" "$from" << 'EOF'
import json, sys
try:
    run = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
sys.exit(0 if any(s["sim_s"] >= float(sys.argv[2]) for s in run.get("state", [])) else 1)
EOF
}
while kill -0 "$pid" 2> /dev/null; do
    if reached; then
        callgrind_control -i on "$pid" > /dev/null 2>&1
        break
    fi
    sleep 1
done
wait "$pid" || { echo "cache-profile: the run failed; see $out.log" >&2; exit 1; }
callgrind_annotate --tree=caller --inclusive=yes --show=Ir,I1mr,D1mr,D1mw,DLmr,DLmw \
    --threshold=100 "$out" 2> /dev/null | python3 -c '
import re, sys
text = sys.stdin.read()
calls = sum(int(n.replace(",", "")) for n in
            re.findall(r"=> \S*NetStack<M>::handle \(([\d,]+)x\)", text))
line = next(l for l in text.splitlines() if re.search(r"\*\s+\S*onionlab_engine::sim::worker_loop \[", l))
values = [int(v.replace(",", "")) for v in re.findall(r"([\d,]+) \(", line)]
names = ["instructions", "L1i misses", "L1d read misses", "L1d write misses",
         "last-level read misses", "last-level write misses"]
print(f"{calls:,} NetStack::handle calls; per call:")
for name, value in zip(names, values):
    print(f"  {name}: {value / calls:.2f}")
'
