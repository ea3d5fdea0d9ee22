#!/usr/bin/env python3
"""What internet-2018's latencies are made of.

Fits every edge's latency between two different points of presence as the sum of one value
per node, latency(a, b) = x_a + x_b (least squares, by alternating means), and prints how
far the edges lie from that fit, each country's x, and the one-way latencies between the
countries where most 2019 relays and the OnionPerf sites were. A graph of geographic
distances would fit such a sum badly; this one fits it to a few milliseconds.

    python3 scripts/graph-latencies.py
"""
import lzma
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GRAPH = os.path.join(ROOT, "data/topology/internet-2018-183-nodes.graphml.xml.xz")
SHOWN = ["DE", "FR", "NL", "US", "GB", "CH", "SE", "RU", "HK"]


def key(text, name, kind):
    for n, k in re.findall(r'attr.name="([^"]+)"[^>]*for="%s" id="([^"]+)"' % kind, text):
        if n == name:
            return k
    raise SystemExit(f"{GRAPH}: no {kind} attribute {name}")


def main():
    text = lzma.open(GRAPH, "rt").read()
    cc_key, lat_key = key(text, "countrycode", "node"), key(text, "latency", "edge")
    nodes = re.findall(r'<node id="([^"]+)">(.*?)</node>', text, re.S)
    country = {n: re.search(r'key="%s">([^<]*)<' % cc_key, body).group(1) for n, body in nodes}
    ids = sorted(country)
    at = {n: i for i, n in enumerate(ids)}
    lat = {}
    for a, b, body in re.findall(r'<edge source="([^"]+)" target="([^"]+)">(.*?)</edge>', text, re.S):
        ms = float(re.search(r'key="%s">([^<]*)<' % lat_key, body).group(1))
        lat[at[a], at[b]] = lat[at[b], at[a]] = ms
    n = len(ids)
    x = [10.0] * n
    for _ in range(200):
        for i in range(n):
            others = [lat[i, j] - x[j] for j in range(n) if j != i and (i, j) in lat]
            x[i] = sum(others) / len(others)
    res = sorted(abs(lat[i, j] - x[i] - x[j]) for i in range(n) for j in range(i + 1, n) if (i, j) in lat)
    q = lambda p: res[min(len(res) - 1, int(p * len(res)))]
    print(f"{n} nodes, {len(res)} edges between different nodes")
    print(f"|latency(a,b) - x_a - x_b|: median {q(0.5):.1f} ms, p90 {q(0.9):.1f} ms, p99 {q(0.99):.1f} ms")
    node_of = {country[k]: at[k] for k in ids}
    print("x (ms): " + ", ".join(f"{c} {x[node_of[c]]:.1f}" for c in SHOWN))
    print("one-way latency (ms) between the nodes of:")
    print("      " + "".join(f"{c:>6}" for c in SHOWN))
    for a in SHOWN:
        print(f"{a:>6}" + "".join(f"{lat[node_of[a], node_of[b]]:6.1f}" for b in SHOWN))


main()
