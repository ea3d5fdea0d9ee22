#!/usr/bin/env python3
"""How far a run's circuits paid for connections that a long-running network would have open.

From a cold start (`tor.warm_channels: false`) no relay has a channel to another, and no
client to its first hop. Each extend to a relay that its circuit's previous hop has no
channel to waits for a TCP connection and a link handshake between them, and a circuit whose
client has no channel to its first hop waits for one more. tor keeps a channel between relays
45 to 75 minutes after its last circuit (`nf_conntimeout_relays`), so on the live network the
relays that carried a circuit in the last hour are connected; the model never closes one, so
a pair of relays is connected in a run from the first circuit that passed between them. From
a warm start the relays are also connected where the run's load would have passed a circuit
within that timeout, so there a pair that no earlier circuit used may still have a channel:
compare the build times by new pairs with a cold run of the same network to see what the
warm start saved.

For the circuits in `circuits.csv` that were built, in order of their start, this counts how
many of their two relay pairs (first and second hop, second and third) no earlier circuit had
used, and whether their client had used their first hop before. It prints, minute by minute,
the share of users' circuits (not the OnionPerf-like ones) with every pair used before, then
the median build time by the number of new pairs, for users' circuits and for the
OnionPerf-like ones after the bootstrap.

    python3 scripts/circuit-warmup.py RUN_DIR...
"""
import csv
import json
import math
import os
import sys


def nearest_rank(xs, q):
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else float("nan")


def run(path):
    with open(os.path.join(path, "run.json")) as f:
        bootstrap = json.load(f)["bootstrap_seconds"]
    with open(os.path.join(path, "circuits.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["outcome"] == "built" and r["build_s"]]
    rows.sort(key=lambda r: float(r["start_s"]))
    pairs, first_hops = set(), set()
    minutes = {}  # minute -> [users' circuits, of them with every relay pair used before]
    builds = {}  # (perf, new first hop, new pairs) -> build times after the bootstrap
    for r in rows:
        guard, middle, exit_ = r["guard"], r["middle"], r["exit"]
        hop_pairs = (frozenset((guard, middle)), frozenset((middle, exit_)))
        new_pairs = sum(p not in pairs for p in hop_pairs)
        new_first = (r["client"], guard) not in first_hops
        pairs.update(hop_pairs)
        first_hops.add((r["client"], guard))
        perf = r["client"].startswith("client-perf-")
        start = float(r["start_s"])
        if not perf:
            m = minutes.setdefault(int(start // 60), [0, 0])
            m[0] += 1
            m[1] += new_pairs == 0
        if start >= bootstrap:
            builds.setdefault((perf, new_first, new_pairs), []).append(float(r["build_s"]))
    print(f"{path}: {len(rows)} circuits built, {len(pairs)} relay pairs used, bootstrap {bootstrap:g} s")
    print("  users' circuits with both relay pairs used before, by minute of their start:")
    print("  " + "  ".join(f"{m}: {100 * known / n:.0f}% of {n}" for m, (n, known) in sorted(minutes.items())))
    print("  after the bootstrap, median build (circuits) by new relay pairs:")
    for perf in (False, True):
        for new_first in (False, True):
            cells = []
            for new_pairs in (0, 1, 2):
                xs = builds.get((perf, new_first, new_pairs), [])
                cells.append(f"{new_pairs}: {nearest_rank(xs, 0.5):.3f} s ({len(xs)})")
            who = "OnionPerf-like" if perf else "users"
            hop = "new first hop" if new_first else "first hop used before"
            print(f"    {who:15} {hop:22} " + "   ".join(cells))


if len(sys.argv) < 2:
    sys.exit(__doc__.strip().splitlines()[-1].strip())
for p in sys.argv[1:]:
    run(p)
