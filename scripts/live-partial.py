#!/usr/bin/env python3
"""The live-network comparison for runs that stopped early, or any run taken alone.

`reproduce live-network` compares complete networks only. A whole network on a machine with
little time ends by Ctrl-C (`onionlab run` then writes what it measured, marked partial), and
its OnionPerf-like downloads still in flight at the stop are in no file: the slowest are the
ones missing, so medians taken over the finished ones alone lean fast. This script puts them
back. An OnionPerf-like client starts a download every `interval` of its group's `perf`
workload whether or not the last has finished, so its schedule follows from its first
download's start; a start after the bootstrap with no row in `downloads.csv` was in flight at
the end (`sim_seconds` in `run.json`). Each such download counts in the time-to-last-byte
percentiles as longer than any finished one; the percentile with it counted as only as long
as it had run is printed beside it when the two differ, so what the stop leaves uncertain is
in view.

Every other statistic is the comparison's (docs/src/user/reproductions/live-network.md):
nearest-rank percentiles over the successful downloads started after the bootstrap, circuit
build time and round trip (`ttfb_s - request_s`) of those downloads, throughput of the 1 MiB
and 5 MiB ones between their 0.5th and 1st MiB, and the live values from
data/live/tor-metrics-2019.json, read as the comparison reads them. One line per network,
then the differences from the live values in percent.

    python3 scripts/live-partial.py RUN_DIR...
"""
import csv
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIVE = os.path.join(HERE, "..", "data", "live", "tor-metrics-2019.json")
SIZES = {51200: "50 KiB", 1048576: "1 MiB", 5242880: "5 MiB"}


def nearest_rank(xs, q):
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else float("nan")


def live_quantile(live, dist, q):
    """Linear between the stored levels, as the comparison's `LiveData::quantile`."""
    levels, values = live["quantiles"], dist["values"]
    for i, level in enumerate(levels):
        if level == q:
            return values[i]
        if level > q and i > 0:
            l0 = levels[i - 1]
            return values[i - 1] + (values[i] - values[i - 1]) * (q - l0) / (level - l0)
    return float("nan")


def perf_intervals(info):
    """Each `perf` client group's interval between download starts, in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}
    out = {}
    for group in info["scenario"].get("clients", []):
        perf = (group.get("workload") or {}).get("perf")
        if perf is None:
            continue
        text = str(perf.get("interval", "60s")).strip()
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
        out[group["name"]] = float(number) * units[text[len(number):].strip() or "s"]
    return out


def network(run):
    with open(os.path.join(run, "run.json")) as f:
        info = json.load(f)
    end, bootstrap = info["sim_seconds"], info["bootstrap_seconds"]
    intervals = perf_intervals(info)
    by_client = {}
    with open(os.path.join(run, "downloads.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["group"] in intervals and row.get("upload") != "true":
                by_client.setdefault(row["client"], []).append(row)
    s = {"ttlb": {}, "in_flight": {}, "build": [], "rtt": [], "rate": [], "finished": 0, "errors": 0}
    for rows in by_client.values():
        size, interval = int(rows[0]["size_bytes"]), intervals[rows[0]["group"]]
        starts = {round(float(r["start_s"]), 3) for r in rows}
        first = min(float(r["start_s"]) for r in rows)
        k = 0
        while first + k * interval < end:
            start = first + k * interval
            if start >= bootstrap and round(start, 3) not in starts:
                s["in_flight"].setdefault(size, []).append(end - start)
            k += 1
        for r in rows:
            if r["bootstrap"] == "true":
                continue
            s["finished"] += 1
            if r["outcome"] != "ok":
                s["errors"] += 1
                continue
            s["ttlb"].setdefault(size, []).append(float(r["ttlb_s"]))
            s["build"].append(float(r["circuit_build_s"]))
            s["rtt"].append(float(r["ttfb_s"]) - float(r["request_s"]))
            if r["throughput_mbit_s"]:
                s["rate"].append(float(r["throughput_mbit_s"]))
    return info, s


def main(runs):
    if not runs:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    with open(LIVE) as f:
        live = json.load(f)
    rows = []  # (statistic, live value, one value per network, lower bounds)
    nets = [network(r) for r in runs]
    for size, name in SIZES.items():
        dist = live["time_to_last_byte_s"][str(size)]
        for label, q in (("median", 0.5), ("p90", 0.9)):
            upper = [nearest_rank(s["ttlb"].get(size, []) + [math.inf] * len(s["in_flight"].get(size, [])), q) for _, s in nets]
            lower = [nearest_rank(s["ttlb"].get(size, []) + s["in_flight"].get(size, []), q) for _, s in nets]
            rows.append((f"TTLB {name}, {label}", live_quantile(live, dist, q), upper, lower))
    for key, dist, name in (("build", "circuit_build_time_s", "circuit build"), ("rtt", "circuit_round_trip_s", "circuit round trip")):
        for label, q in (("median", 0.5), ("p90", 0.9)):
            values = [nearest_rank(s[key], q) for _, s in nets]
            rows.append((f"{name}, {label}", live_quantile(live, live[dist], q), values, values))
    for label, q in (("median", 0.5), ("p10", 0.1)):
        values = [nearest_rank(s["rate"], q) for _, s in nets]
        rows.append((f"throughput Mbit/s, {label}", live_quantile(live, live["throughput_mbit_s"], q), values, values))
    for run, (info, s) in zip(runs, nets):
        flight = sum(len(v) for v in s["in_flight"].values())
        state = "complete" if info.get("complete") else "partial"
        print(f"{run}: {state}, measured from {info['bootstrap_seconds']:g} to {info['sim_seconds']:g} s; "
              f"{s['finished']} downloads finished, {s['errors']} timed out or failed, {flight} in flight at the end")
    print(f"{'statistic':28}{'live':>8}" + "".join(f"{'network ' + str(i + 1):>26}" for i in range(len(runs))))
    for stat, lv, values, lows in rows:
        cells = ""
        for v, lo in zip(values, lows):
            text = f"{v:.3f} ({100 * (v / lv - 1):+.0f}%)"
            if lo != v:
                text = f"[{lo:.3f}] " + text
            cells += f"{text:>26}"
        print(f"{stat:28}{lv:>8.3f}{cells}")
    print("[x]: the percentile with the downloads in flight counted as only as long as they had run.")


main(sys.argv[1:])
