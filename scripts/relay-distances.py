#!/usr/bin/env python3
"""How far apart a network's relays sit, placed at random or where their addresses say.

Draws pairs of distinct relays of a shipped consensus by consensus weight (as paths draw
them, roughly) and averages the one-way latency between their nodes on each shipped graph
(internet-2018 and the geographic internet-geo): with
every relay on a node drawn at random (`relays.sample.place: random`), and with every relay on
the node of the country its address lies in by a shipped country table (`place: address`;
relays the table does not place go anywhere). Each figure is the mean over 20 placements of
20,000 pairs each: a few heavy relays carry much of the weight, so one random placement alone
moves the mean by tens of milliseconds.

    python3 scripts/relay-distances.py [CONSENSUS.xz [GEOIP.xz]]

Defaults: data/consensus/2019-12-15-13-00-00-microdesc-consensus.xz and
data/geoip/geoip-2021-03-12.xz. Seeded, so it prints the same figures every time.
"""
import bisect
import itertools
import ipaddress
import lzma
import os
import random
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CONSENSUS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "data/consensus/2019-12-15-13-00-00-microdesc-consensus.xz")
GEOIP = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "data/geoip/geoip-2021-03-12.xz")
GRAPHS = [("internet-2018", os.path.join(ROOT, "data/topology/internet-2018-183-nodes.graphml.xml.xz")),
          ("internet-geo", os.path.join(ROOT, "data/topology/internet-geo-183-nodes.graphml.xml.xz"))]
PLACEMENTS = 20
PAIRS = 20_000


def graph(path):
    text = lzma.open(path, "rt").read()
    cc_key = [k for name, k in re.findall(r'attr.name="([^"]+)"[^>]*for="node" id="([^"]+)"', text)
              if name == "countrycode"][0]
    lat_key = [k for name, k in re.findall(r'attr.name="([^"]+)"[^>]*for="edge" id="([^"]+)"', text)
               if name == "latency"][0]
    country = {}
    for nid, body in re.findall(r'<node id="([^"]+)">(.*?)</node>', text, re.S):
        country[nid] = re.search(r'key="%s">([^<]*)<' % cc_key, body).group(1)
    latency = {}
    for a, b, body in re.findall(r'<edge source="([^"]+)" target="([^"]+)">(.*?)</edge>', text, re.S):
        ms = float(re.search(r'key="%s">([^<]*)<' % lat_key, body).group(1))
        latency[a, b] = latency[b, a] = ms
    return country, latency


def table():
    rows = [line.strip().split(",") for line in lzma.open(GEOIP, "rt") if line[:1].isdigit()]
    return [int(r[0]) for r in rows], rows


def relays():
    out = []
    for line in lzma.open(CONSENSUS, "rt"):
        if line.startswith("r "):
            out.append([line.split()[5], 0])
        elif line.startswith("w ") and out:
            out[-1][1] = int(re.search(r"Bandwidth=(\d+)", line).group(1))
    return out


def main():
    for name, path in GRAPHS:
        distances(name, *graph(path))


def distances(name, country, latency):
    nodes = sorted(country)
    by_country = {}
    for n in nodes:
        by_country.setdefault(country[n], []).append(n)
    first, rows = table()
    rel = relays()
    cumulative = list(itertools.accumulate(w for _, w in rel))
    indices = range(len(rel))

    def where(addr):
        x = int(ipaddress.IPv4Address(addr))
        i = bisect.bisect_right(first, x) - 1
        return rows[i][2] if i >= 0 and int(rows[i][1]) >= x else None

    countries = [where(addr) for addr, _ in rel]
    for mode in ("random", "address"):
        rng = random.Random(1)
        total = n = 0
        for _ in range(PLACEMENTS):
            place = [rng.choice((by_country.get(cc) if mode == "address" else None) or nodes)
                     for cc in countries]
            pairs = 0
            while pairs < PAIRS:
                i, j = rng.choices(indices, cum_weights=cumulative, k=2)
                if i != j:
                    total += latency[place[i], place[j]]
                    pairs += 1
            n += pairs
        print(f"{name}, place: {mode:8} mean one-way latency between relays drawn by weight: "
              f"{total / n:.1f} ms")


main()
