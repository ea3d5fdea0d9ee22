#!/usr/bin/env python3
"""How far live relays' capacities departed from their consensus weights.

Reads data/relays/relays-2018-1998.csv (1,998 relays of the 2018 network, tmodel-ccs2018) and,
for the relays with a weight, takes each one's capacity as tornettools does (the least of
BandwidthRate, BandwidthBurst and the largest observed bandwidth) over its consensus weight.
Prints, per quarter of the relays by weight, the 10th, 50th and 90th percentiles of that
ratio and the standard deviation of its natural log: the spread `relays.sample.rate_spread`
stands for. The file's weights are coarse for small relays (1, 2, 5, ...), so the top
quarter, which carries most of the weight, measures the spread best.

    python3 scripts/capacity-spread.py
"""
import csv
import math
import os
import statistics

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../data/relays/relays-2018-1998.csv")

rows = []
for r in csv.DictReader(open(PATH)):
    weight = float(r["Consensus(KB/s)"])
    capacity = min(float(r["Rate(KiB/s)"]), float(r["Burst(KiB/s)"]), float(r["MaxObserved(KiB/s)"]))
    if weight > 0 and capacity > 0:
        rows.append((weight, capacity / weight))
rows.sort()
n = len(rows)
print(f"{n} relays with a weight and a capacity")
for k in range(4):
    part = rows[k * n // 4:(k + 1) * n // 4]
    ratios = sorted(x for _, x in part)
    m = len(ratios)
    sd = statistics.stdev(math.log(x) for x in ratios)
    print(f"weights {part[0][0]:g} to {part[-1][0]:g}: ratio p10 {ratios[m // 10]:.0f}, "
          f"p50 {ratios[m // 2]:.0f}, p90 {ratios[9 * m // 10]:.0f}; sd of ln(ratio) {sd:.2f}")
