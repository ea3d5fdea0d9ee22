#!/usr/bin/env bash
# Runs a long `onionlab run` (the full network for ten simulated minutes takes hours on a
# laptop) so that it can be paused to disk and resumed later with CRIU (checkpoint/restore in
# user space, https://criu.org). onionlab needs nothing for this: a run is one process whose
# state is its memory, and a restored run carries on exactly where it stopped, so its results
# are byte-identical to an uninterrupted run's.
#
# Usage:
#   scripts/long-run.sh start STATE -- ONIONLAB_ARGS...   e.g.
#       scripts/long-run.sh start target/nf-state -- target/release/onionlab run \
#           examples/net-full.yaml -o target/nf-out --stop-time 10m --threads 2 --quiet
#   scripts/long-run.sh pause STATE    writes the run to STATE/checkpoint and stops it
#   scripts/long-run.sh resume STATE   restores it from STATE/checkpoint; it goes on running
#   scripts/long-run.sh status STATE   running, paused or ended; resident memory; the legs so far
#
# STATE is a directory of the script's own (not the run's -o directory): the run's process id,
# its standard output and error (STATE/output.log), the checkpoint and STATE/legs.log, which
# records when each leg started and ended. The run's own run.json counts only the time it ran:
# it runs in a time namespace of its own, whose clocks CRIU restores, so the monotonic clock
# it measures wall time with does not count the pause; and in a process-id namespace of its
# own, so restoring it never clashes with the ids of processes started since.
#
# Needs root and CRIU 4.0 or newer (`CRIU=/path/to/criu` to use one not on the PATH; CRIU 3.17
# fails `criu check` on recent kernels' vDSO), and util-linux's `unshare --time`. Between
# pause and resume, leave the run's output directory and STATE/output.log as they are: CRIU
# reopens them at the recorded sizes and refuses files that changed. Resume on the same
# machine (same kernel, same onionlab binary at the same path).
set -euo pipefail

criu=${CRIU:-criu}
cmd=${1:-} state=${2:-}
if [ -z "$cmd" ] || [ -z "$state" ]; then
    sed -n '8,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
shift 2

now() { date -u '+%Y-%m-%dT%H:%M:%SZ'; }
pid_of() { cat "$state/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
need_criu() {
    if ! command -v "$criu" >/dev/null; then
        echo "long-run: CRIU not found ('$criu'); install CRIU 4.0 or newer, or set CRIU" >&2
        exit 2
    fi
}

case $cmd in
start)
    [ "${1:-}" = "--" ] && shift
    if [ $# -eq 0 ]; then
        echo "long-run: start needs the onionlab command after --" >&2
        exit 2
    fi
    if alive; then
        echo "long-run: $state already holds a running run (pid $(pid_of))" >&2
        exit 2
    fi
    if [ -d "$state/checkpoint" ]; then
        echo "long-run: $state holds a paused run; resume it, or remove $state first" >&2
        exit 2
    fi
    mkdir -p "$state"
    state=$(cd "$state" && pwd)
    printf '%q ' "$@" > "$state/command"
    # The run leads a session of its own (CRIU dumps a whole session, and refuses a process
    # that is not its leader without --shell-job), in a time namespace of its own (see above)
    # and a process-id namespace of its own, so that it keeps its ids (it is 1 there) when
    # restored beside other processes that took its old ones. `exec` keeps one process, whose
    # output goes to a file no other process writes. The pid file gets its id outside.
    rm -f "$state/pid"
    setsid unshare --time --pid --fork setsid sh -c '
        while read -r key id _; do [ "$key" = NSpid: ] && echo "$id" > "$1/pid"; done \
            < /proc/self/status
        log=$1/output.log; shift; exec "$@" < /dev/null > "$log" 2>&1' \
        sh "$state" "$@" > /dev/null 2>&1 &
    for _ in $(seq 50); do
        [ -s "$state/pid" ] && break
        sleep 0.1
    done
    echo "started $(now) pid $(pid_of)" >> "$state/legs.log"
    echo "long-run: started, pid $(pid_of); output in $state/output.log"
    ;;
pause)
    need_criu
    if ! alive; then
        echo "long-run: no running run in $state" >&2
        exit 2
    fi
    rm -rf "$state/checkpoint"
    mkdir -p "$state/checkpoint"
    if ! "$criu" dump -t "$(pid_of)" -D "$state/checkpoint" -o dump.log; then
        echo "long-run: dump failed (the run goes on); see $state/checkpoint/dump.log" >&2
        exit 1
    fi
    echo "paused $(now)" >> "$state/legs.log"
    echo "long-run: paused; $(du -sh "$state/checkpoint" | cut -f1) in $state/checkpoint"
    ;;
resume)
    need_criu
    if alive; then
        echo "long-run: the run in $state is running" >&2
        exit 2
    fi
    if [ ! -f "$state/checkpoint/pstree.img" ]; then
        echo "long-run: no checkpoint in $state/checkpoint" >&2
        exit 2
    fi
    # CRIU writes the restored run's id, and will not overwrite a file.
    rm -f "$state/pid"
    if ! "$criu" restore -D "$state/checkpoint" -d -o restore.log --pidfile "$state/pid"; then
        echo "long-run: restore failed; see $state/checkpoint/restore.log" >&2
        exit 1
    fi
    # A checkpoint is restored once: the run writes on, so its files soon no longer match.
    rm -rf "$state/checkpoint"
    echo "resumed $(now) pid $(pid_of)" >> "$state/legs.log"
    echo "long-run: resumed, pid $(pid_of)"
    ;;
status)
    if alive; then
        rss=$(awk '/VmRSS/ {print $2}' "/proc/$(pid_of)/status")
        echo "running, pid $(pid_of), resident $((rss / 1024)) MiB"
    elif [ -d "$state/checkpoint" ]; then
        echo "paused ($(du -sh "$state/checkpoint" | cut -f1) checkpoint)"
    else
        echo "ended: $(tail -n 1 "$state/output.log" 2>/dev/null)"
    fi
    cat "$state/legs.log"
    ;;
*)
    echo "long-run: unknown command '$cmd' (start, pause, resume or status)" >&2
    exit 2
    ;;
esac
