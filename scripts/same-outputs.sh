#!/usr/bin/env bash
# Checks that two onionlab binaries give byte-identical results: runs each on SCENARIO with the
# same arguments and compares every result file but run.json (which holds wall times).
# Prints "identical" or the first difference, and exits 1 on a difference.
#
# Usage: scripts/same-outputs.sh BIN_A BIN_B SCENARIO [RUN_ARGS...]   e.g.
#   scripts/same-outputs.sh target/before/onionlab target/release/onionlab examples/web-6876.yaml \
#       --stop-time 30s --threads 2
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
a=$1 b=$2 scenario=$3
shift 3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for side in a b; do
    bin=$a
    [ "$side" = b ] && bin=$b
    "$bin" run "$scenario" -o "$out/$side" --force --quiet --no-report "$@" > /dev/null 2>&1 ||
        { echo "$bin failed on $scenario" >&2; exit 1; }
done
status=0
for f in "$out"/a/*; do
    name=$(basename "$f")
    [ "$name" = run.json ] && continue
    cmp "$f" "$out/b/$name" || status=1
done
# Both runs must have written the same set of files.
[ "$(ls "$out/a")" = "$(ls "$out/b")" ] || { echo "the runs wrote different files" >&2; status=1; }
[ $status = 0 ] && echo "identical: $scenario $*"
exit $status
