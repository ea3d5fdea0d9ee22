#!/usr/bin/env bash
# Times two onionlab binaries side by side: each round starts both at once on one thread each
# (the second 0.2 s after the first, which binary goes first alternating), so both see the
# same machine, and prints wall seconds, user seconds and peak RSS of each and their ratio.
# On a shared or noisy machine this resolves differences that sequential runs cannot.
#
# Usage: scripts/pair.sh ROUNDS STOP SCENARIO BIN_A BIN_B   e.g.
#   scripts/pair.sh 4 60s examples/web-6876.yaml target/before/onionlab target/release/onionlab
set -euo pipefail
if [ $# -ne 5 ]; then
    sed -n '7,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
rounds=$1 stop=$2 scenario=$3 a=$4 b=$5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() { # BIN TAG
    /usr/bin/time -f '%e %U %M' -o "$out/$2.time" "$1" run "$scenario" -o "$out/$2" --force \
        --stop-time "$stop" --threads 1 --quiet --no-report > /dev/null 2>&1
}
echo "round  A wall s  A user s  A peak kB  B wall s  B user s  B peak kB  B/A wall"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
        one "$a" a & sleep 0.2; one "$b" b & wait
    else
        one "$b" b & sleep 0.2; one "$a" a & wait
    fi
    read -r aw au am < "$out/a.time"
    read -r bw bu bm < "$out/b.time"
    awk -v r="$r" -v aw="$aw" -v au="$au" -v am="$am" -v bw="$bw" -v bu="$bu" -v bm="$bm" \
        'BEGIN { printf "%5d  %8.2f  %8.2f  %9d  %8.2f  %8.2f  %9d  %8.3f\n", r, aw, au, am, bw, bu, bm, bw / aw }'
done
