#!/usr/bin/env python3
"""The OnionPerf-like downloads of generated networks, measuring site by measuring site.

`reproduce live-network` pools every site, as Tor Metrics' data does. Where the sites sit
matters once the graph has geography: a circuit from the Netherlands through Europe's relays
and back is short, one from Hong Kong crosses Eurasia twice. For each site (the last part of
a `perf-<size>-<site>` group name), this prints the median over the given runs' successful
downloads after the bootstrap of: the circuit round trip (`ttfb_s - request_s`), the circuit
build time, the time to last byte per size, and the throughput of the 1 MiB and 5 MiB
downloads (`throughput_mbit_s`: between their 0.5th and 1st MiB, as Tor Metrics takes it;
4.19 Mbit/s at the live network's 2019 median), with the number of downloads. The last row
pools the sites.

    python3 scripts/perf-by-site.py OUT/as-generated/trial-*
"""
import csv
import os
import sys

SIZES = {51200: "50 KiB", 1048576: "1 MiB", 5242880: "5 MiB"}


def median(xs):
    xs = sorted(xs)
    # Nearest rank, as the run's summaries and the comparison take it.
    return xs[max(0, -(-len(xs) // 2) - 1)] if xs else float("nan")


def main(runs):
    if not runs:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    by_site = {}
    for run in runs:
        path = os.path.join(run, "downloads.csv")
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                group = row["group"]
                if not group.startswith("perf-") or row["outcome"] != "ok" or row["bootstrap"] == "true":
                    continue
                for name in (group.rsplit("-", 1)[1], "all"):
                    site = by_site.setdefault(name, {"rtt": [], "build": [], "ttlb": {}, "rate": []})
                    size, ttfb, ttlb = int(row["size_bytes"]), float(row["ttfb_s"]), float(row["ttlb_s"])
                    site["rtt"].append(ttfb - float(row["request_s"]))
                    site["build"].append(float(row["circuit_build_s"]))
                    site["ttlb"].setdefault(size, []).append(ttlb)
                    if row.get("throughput_mbit_s"):
                        site["rate"].append(float(row["throughput_mbit_s"]))
    print(f"{len(runs)} runs; medians in seconds (downloads)")
    print(f"{'site':6}{'round trip':>16}{'build':>16}" + "".join(f"{SIZES[s]:>16}" for s in SIZES)
          + f"{'Mbit/s':>16}")
    for name in sorted(by_site, key=lambda n: (n == "all", n)):
        s = by_site[name]
        cells = [(median(s["rtt"]), len(s["rtt"])), (median(s["build"]), len(s["build"]))]
        cells += [(median(s["ttlb"].get(size, [])), len(s["ttlb"].get(size, []))) for size in SIZES]
        cells.append((median(s["rate"]), len(s["rate"])))
        print(f"{name:6}" + "".join(f"{m:>10.3f} ({n:>3})" for m, n in cells))


main(sys.argv[1:])
