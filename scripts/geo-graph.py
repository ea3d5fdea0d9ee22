#!/usr/bin/env python3
"""Writes data/topology/internet-geo-183-nodes.graphml.xml.xz: internet-2018's points of
presence with latencies that follow geography.

internet-2018's latency between two countries is close to a sum of one value per country
(scripts/graph-latencies.py): it has no geography, so a circuit through Europe from the
Netherlands takes as long as one from Hong Kong. This graph keeps internet-2018's nodes as
they are (country, access links) and replaces every edge:

- between two countries, the one-way latency is the great-circle distance between their
  points (data/topology/country-points.csv: the capital, where one is known) times 2.1,
  divided by the speed of light in fibre (2/3 of c). The factor is the rule of thumb that
  measurement campaigns give for Internet paths (Bozkurt et al., "Dissecting Latency in the
  Internet's Fiber Infrastructure", 2018: "multiply line-of-sight distance by 2.1, then
  divide by the speed of light in fiber"); it holds for the median path, so well-built
  long-haul routes (across the North Atlantic) come out slower than they are and poorly
  connected regions faster;
- within a country (the self-loop), the same rule over the mean distance between two points
  of a disc of the country's area (128 / (45 pi) times its radius);
- no jitter and no loss: nothing measured says what they were between these places.

Great-circle distances obey the triangle inequality, so every shortest path is the direct
edge. The output is deterministic; rerun the script and compare to check the shipped file.

    python3 scripts/geo-graph.py            # rewrites the shipped file
    python3 scripts/geo-graph.py --check    # exits 1 if the shipped file differs
"""
import csv
import lzma
import math
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SOURCE = os.path.join(ROOT, "data/topology/internet-2018-183-nodes.graphml.xml.xz")
POINTS = os.path.join(ROOT, "data/topology/country-points.csv")
OUTPUT = os.path.join(ROOT, "data/topology/internet-geo-183-nodes.graphml.xml.xz")

# Line-of-sight distance to path latency (Bozkurt et al. 2018, above).
INFLATION = 2.1
# Light in fibre: 2/3 of c, in km per millisecond.
FIBRE_KM_PER_MS = 299_792.458 * 2.0 / 3.0 / 1000.0
# Mean radius of the Earth (IUGG), km.
EARTH_KM = 6371.0088
# Mean distance between two uniform points of a unit disc.
DISC_MEAN_DISTANCE = 128.0 / (45.0 * math.pi)


def great_circle_km(a, b):
    (lat1, lon1), (lat2, lon2) = [(math.radians(p[0]), math.radians(p[1])) for p in (a, b)]
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_KM * math.asin(min(1.0, math.sqrt(h)))


def latency_ms(km):
    return INFLATION * km / FIBRE_KM_PER_MS


def within_km(area_km2):
    return DISC_MEAN_DISTANCE * math.sqrt(area_km2 / math.pi)


def nodes_of(text):
    keys = {k: n for n, k in re.findall(r'attr.name="([^"]+)"[^>]*for="node" id="([^"]+)"', text)}
    nodes = []
    for node_id, body in re.findall(r'<node id="([^"]+)">(.*?)</node>', text, re.S):
        attrs = {keys[k]: v for k, v in re.findall(r'<data key="([^"]+)">([^<]*)</data>', body) if k in keys}
        nodes.append((node_id, attrs))
    return nodes


def points():
    with open(POINTS, newline="") as f:
        rows = list(csv.DictReader(f))
    return {r["code"]: ((float(r["lat"]), float(r["lon"])), float(r["area_km2"])) for r in rows}


def build():
    nodes = nodes_of(lzma.open(SOURCE, "rt").read())
    where = points()
    missing = sorted({a["countrycode"] for _, a in nodes} - set(where))
    if missing:
        sys.exit(f"{POINTS}: no point for {', '.join(missing)}")
    out = [
        '<?xml version="1.0" encoding="utf-8"?>',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
        '  <key attr.name="packetloss" attr.type="double" for="edge" id="d9" />',
        '  <key attr.name="jitter" attr.type="double" for="edge" id="d8" />',
        '  <key attr.name="latency" attr.type="double" for="edge" id="d7" />',
        '  <key attr.name="type" attr.type="string" for="node" id="d5" />',
        '  <key attr.name="bandwidthup" attr.type="int" for="node" id="d4" />',
        '  <key attr.name="bandwidthdown" attr.type="int" for="node" id="d3" />',
        '  <key attr.name="countrycode" attr.type="string" for="node" id="d2" />',
        '  <key attr.name="ip" attr.type="string" for="node" id="d1" />',
        '  <key attr.name="packetloss" attr.type="double" for="node" id="d0" />',
        '  <graph edgedefault="undirected">',
    ]
    for node_id, a in nodes:
        out.append(f'    <node id="{node_id}">')
        for key, name in [("d0", None), ("d1", "ip"), ("d2", "countrycode"), ("d3", "bandwidthdown"), ("d4", "bandwidthup"), ("d5", "type")]:
            value = "0.0" if name is None else a[name]
            out.append(f'      <data key="{key}">{value}</data>')
        out.append("    </node>")
    for i, (a_id, a) in enumerate(nodes):
        for b_id, b in nodes[i:]:
            pa, area = where[a["countrycode"]]
            km = within_km(area) if a_id == b_id else great_circle_km(pa, where[b["countrycode"]][0])
            out.append(f'    <edge source="{a_id}" target="{b_id}">')
            out.append(f'      <data key="d7">{latency_ms(km):.3f}</data>')
            out.append('      <data key="d8">0.0</data>')
            out.append('      <data key="d9">0.0</data>')
            out.append("    </edge>")
    out += ["  </graph>", "</graphml>", ""]
    return lzma.compress("\n".join(out).encode(), preset=9 | lzma.PRESET_EXTREME)


def main():
    data = build()
    if sys.argv[1:] == ["--check"]:
        with open(OUTPUT, "rb") as f:
            same = f.read() == data
        print(f"{OUTPUT}: {'as the script writes it' if same else 'differs from what the script writes'}")
        sys.exit(0 if same else 1)
    with open(OUTPUT, "wb") as f:
        f.write(data)
    print(f"wrote {OUTPUT} ({len(data)} bytes)")


main()
