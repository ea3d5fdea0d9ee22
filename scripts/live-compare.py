#!/usr/bin/env python3
"""Compares generated networks' OnionPerf-like clients with the live Tor network's
measurements in data/live/tor-metrics-2019.json.

Usage: python3 scripts/live-compare.py RUN_DIR [RUN_DIR...]

Each RUN_DIR is a run (`onionlab run`) or a set of trials (`onionlab run --trials K`), whose
trials are taken as independently sampled networks, as Jansen, Tracey and Goldberg ("Once is
Never Enough", USENIX Security 2021) sample them. For the median and the 90th percentile of
time to last byte per download size, and of the perf clients' circuit build times, it prints
the mean over networks with its 95% Student-t interval, the live value and the difference in
percent; then the perf downloads' error rate, the users' streams' error rate and the relay
goodput per network. Only rows after the bootstrap period count, as in the summary.
"""

import csv
import json
import math
import os
import statistics
import sys

LIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "live",
                    "tor-metrics-2019.json")
# Two-sided 95% Student-t critical values by degrees of freedom (1..30).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def quantile(values, q):
    """Linear interpolation between order statistics, as Tor Metrics computes quartiles."""
    v = sorted(values)
    if not v:
        return math.nan
    r = q * (len(v) - 1)
    lo = int(r)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (r - lo)


def live_quantile(dist, q):
    return dist["values"][round(q * 100) - 1]


def mean_ci(xs):
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return math.nan, math.nan
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan
    t = T975[min(len(xs) - 1, len(T975)) - 1]
    return m, t * statistics.stdev(xs) / math.sqrt(len(xs))


def networks(dirs):
    out = []
    for d in dirs:
        trials = sorted(
            (os.path.join(d, t) for t in os.listdir(d) if t.startswith("trial-")),
            key=lambda p: int(p.rsplit("-", 1)[1]),
        )
        out.extend(trials or [d])
    return out


def read_network(path):
    ttlb, errors, builds = {}, {}, []
    users, users_bad = 0, 0
    with open(os.path.join(path, "downloads.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["bootstrap"] == "true":
                continue
            group = row["group"]
            if group.startswith("perf"):
                size = int(row["size_bytes"])
                e = errors.setdefault(size, [0, 0])
                e[1] += 1
                if row["outcome"] != "ok":
                    e[0] += 1
                    continue
                ttlb.setdefault(size, []).append(float(row["ttlb_s"]))
                if row["circuit_build_s"]:
                    builds.append(float(row["circuit_build_s"]))
            elif group.startswith("users"):
                users += 1
                users_bad += row["outcome"] != "ok"
    goodput = math.nan
    with open(os.path.join(path, "summary.txt")) as f:
        for line in f:
            if line.startswith("Total relay goodput:"):
                goodput = float(line.split()[3])
    return ttlb, errors, builds, users, users_bad, goodput


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip())
    with open(LIVE) as f:
        live = json.load(f)
    nets = [read_network(p) for p in networks(sys.argv[1:])]
    print(f"{len(nets)} networks against the live network of {live['period']['from']} to "
          f"{live['period']['to']}")
    print(f"{'statistic':<28} {'model (mean ± 95% CI)':>24} {'live':>8} {'difference':>11}")
    rows = [(f"TTLB {size // 1024} KiB" if size < 1 << 20 else f"TTLB {size >> 20} MiB",
             lambda n, s=size: n[0].get(s, []), live["time_to_last_byte_s"][str(size)])
            for size in (51200, 1048576, 5242880)]
    rows.append(("circuit build", lambda n: n[2], live["circuit_build_time_s"]))
    for name, values, dist in rows:
        for q, label in ((0.5, "median"), (0.9, "p90")):
            m, h = mean_ci([quantile(values(n), q) for n in nets])
            lv = live_quantile(dist, q)
            print(f"{name + ' ' + label:<28} {m:>13.2f} ± {h:<8.2f} {lv:>8.2f} "
                  f"{100 * (m / lv - 1):>+10.0f}%")
    for size in (51200, 1048576, 5242880):
        bad = sum(n[1].get(size, [0, 0])[0] for n in nets)
        total = sum(n[1].get(size, [0, 0])[1] for n in nets)
        print(f"perf {size:>7} B: {bad} of {total} downloads failed or timed out")
    for i, n in enumerate(nets, 1):
        share = 100 * n[4] / n[3] if n[3] else math.nan
        print(f"network {i}: users' streams {n[3]}, not ok {share:.1f}%, relay goodput "
              f"{n[5]:.1f} MiB/s")


if __name__ == "__main__":
    main()
