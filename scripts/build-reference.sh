#!/usr/bin/env bash
# Builds the reference binary for scripts/floors.sh: onionlab as it was when the work on the
# full-size networks issue (15) began, commit 7692a8b (the last before it). The issue measured
# its table with somewhat older code; timed beside the current binary on the same machine,
# this one stands in for it and turns the issue's wall-clock floors into speed-ups that do
# not depend on which machine runs them.
#
# Usage: scripts/build-reference.sh   prints the binary's path, target/reference/release/onionlab
#
# The source goes to target/reference-src (a git worktree, detached at the commit), the build
# to target/reference; about five minutes on 2 cores. Needs the repository's history.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=7692a8b39aee74f825831407734abfa336154228
src=target/reference-src
if [ ! -e "$src/.git" ]; then
    mkdir -p target
    git worktree add --detach "$src" "$commit" > /dev/null
fi
[ "$(git -C "$src" rev-parse HEAD)" = "$commit" ] || {
    echo "build-reference: $src is not at $commit; remove it (git worktree remove --force $src)" >&2
    exit 2
}
CARGO_TARGET_DIR="$PWD/target/reference" cargo build --release -p onionlab \
    --manifest-path "$src/Cargo.toml" >&2
echo "$PWD/target/reference/release/onionlab"
