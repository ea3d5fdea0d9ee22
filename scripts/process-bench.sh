#!/usr/bin/env bash
# Benchmarks of managed processes (the performance page's "Real programs" tables):
#  1. the wall time of one system call made through the shim, of each kind, against the same
#     call made natively (crates/process/programs/calls.c);
#  2. system calls per second through the shim in a TCP echo loop of 100-byte messages, one
#     client-server pair on 1 thread, then 100 pairs on 2 threads;
#  3. onionlab's memory per managed process, beyond the process itself (peak RSS of runs with
#     1 and 101 processes that sleep).
# Prints medians of ROUNDS runs. Needs cc and python3.
#
# Usage: scripts/process-bench.sh [ROUNDS] [BINARY]
set -euo pipefail
rounds=${1:-3}
bin=$(realpath "${2:-target/release/onionlab}")
progs=$(realpath crates/process/programs)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for p in calls tcp-echo-server tcp-echo-client; do
    cc -O2 -o "$p" "$progs/$p.c"
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }
field() { python3 -c "import json,sys; r=json.load(open('$1/run.json')); print(eval(sys.argv[1]))" "$2"; }

echo "## One call, through the shim and natively (median of $rounds runs)"
echo "| kind | calls | native ns/call | through the shim ns/call | ratio |"
echo "| --- | --- | --- | --- | --- |"
for kind in local native served; do
    n=1000000
    [ "$kind" = served ] && n=200000
    printf 'run: { stop_time: 10s }\nprocesses:\n  - { name: c, path: %s, args: [%s, "%s"] }\n' \
        "$work/calls" "$kind" "$n" > calls-$kind.yaml
    nat=$(for _ in $(seq "$rounds"); do
        t0=$(now); ./calls "$kind" "$n" > /dev/null; t1=$(now)
        calc "($t1 - $t0) * 1e9 / $n"
    done | median)
    sim=$(for _ in $(seq "$rounds"); do
        "$bin" run calls-$kind.yaml -o out-$kind --force --quiet --no-report > /dev/null 2>&1
        # The process's own time: from its start to its exit, as onionlab's wall clock saw
        # it, less the run's fixed cost, is most of the run; take the whole run, which
        # overstates the per-call cost by at most a few tens of nanoseconds at these counts.
        calc "$(field out-$kind "r['wall_seconds']") * 1e9 / $n"
    done | median)
    printf '| %s | %d | %.0f | %.0f | %.1f |\n' "$kind" "$n" "$nat" "$sim" "$(calc "$sim / $nat")"
done

echo
echo "## TCP echo of 100-byte messages (median of $rounds runs)"
echo "| pairs | threads | system calls | wall s | calls per second |"
echo "| --- | --- | --- | --- | --- |"
python3 - "$work" <<'EOF'
import sys
work = sys.argv[1]
for pairs in (1, 100):
    lines = ["run: { stop_time: 600s }",
             "network: { graph: builtin, builtin: { latency: 10ms, bandwidth: 1 Gbit } }",
             "processes:"]
    for i in range(1, pairs + 1):
        lines.append(f"  - {{ name: s{i}, path: {work}/tcp-echo-server, args: ['7000', '1'] }}")
        lines.append(f"  - {{ name: c{i}, path: {work}/tcp-echo-client, "
                     f"args: [process-s{i}-1, '7000', '100', '{20000 // pairs * 10 if pairs > 1 else 20000}'], start: 1s }}")
    open(f"{work}/echo-{pairs}.yaml", "w").write("\n".join(lines) + "\n")
EOF
for spec in "1 1" "100 2"; do
    set -- $spec
    rows=$(for _ in $(seq "$rounds"); do
        "$bin" run echo-$1.yaml -o out-echo-$1 --force --quiet --no-report --threads "$2" > /dev/null 2>&1
        calls=$(field out-echo-$1 "sum(p['system_calls'] for p in r['processes'])")
        wall=$(field out-echo-$1 "r['wall_seconds']")
        ok=$(field out-echo-$1 "all(p['exit_code'] == 0 for p in r['processes'])")
        [ "$ok" = True ] || { echo "a process of echo-$1 failed" >&2; exit 1; }
        echo "$wall $calls"
    done | sort -g)
    mid=$(echo "$rows" | sed -n "$(( (rounds + 1) / 2 ))p")
    wall=${mid% *}
    calls=${mid#* }
    printf '| %d | %d | %d | %.2f | %.0f |\n' "$1" "$2" "$calls" "$wall" "$(calc "$calls / $wall")"
done

echo
echo "## onionlab's memory per managed process (median of $rounds runs)"
rss() {
    python3 - "$1" "$work" <<'EOF'
import sys
n, work = int(sys.argv[1]), sys.argv[2]
lines = ["run: { stop_time: 10s }", "processes:",
         f"  - {{ name: s, count: {n}, path: /bin/sleep, args: ['100'] }}"]
open(f"{work}/sleep-{n}.yaml", "w").write("\n".join(lines) + "\n")
EOF
    for _ in $(seq "$rounds"); do
        "$bin" run sleep-$1.yaml -o out-sleep-$1 --force --quiet --no-report --threads 1 > /dev/null 2>&1
        field out-sleep-$1 "r['peak_rss_bytes']"
    done | median
}
one=$(rss 1)
many=$(rss 101)
printf 'peak RSS with 1 process: %d bytes; with 101: %d bytes; per process: %.0f bytes\n' \
    "$one" "$many" "$(calc "($many - $one) / 100")"
