#!/usr/bin/env python3
"""What held the live relays to their capacity: tor's token bucket or their machine.

A relay's descriptor gives its configured BandwidthRate (tor's default is 1 GiB/s, no limit)
and the most it was observed to carry. A relay whose rate lies at or near its observed
bandwidth was held by tor's token bucket; one whose rate lies well above it (more than 1.2
times) was held by its machine, link or load. Prints the share of relays, and of their
observed capacity, on each side, for the 1,998 relays of 2018 that ship with onionlab
(data/relays/relays-2018-1998.csv, tmodel-ccs2018), and for any Shadow configurations named
on the command line: the `shadow.config.xml` of a tornettools bundle, such as those of the
2019 networks in Jansen, Tracey and Goldberg's artifact (neverenough-sec2021, files
model_validation/configs/shadowtor-0.31-*-config.tar.xz), whose relay hosts carry the
observed bandwidth as their link (KiB/s) and the descriptor's rate and burst as tor flags.

    python3 scripts/relay-limits.py [shadow.config.xml ...]
"""
import csv
import os
import re
import sys

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../data/relays/relays-2018-1998.csv")
# A rate within this factor of the observed bandwidth counts as the relay's limit: tor lets a
# relay pass its rate by a little while its burst lasts, so observed may exceed it.
NEAR = 1.2


def report(name, relays, default_rate):
    """relays: (observed, rate) pairs in one unit; default_rate: tor's 1 GiB/s in that unit."""
    total = sum(o for o, _ in relays)
    held = [(o, r) for o, r in relays if r <= NEAR * o]
    share = sum(o for o, _ in held) / total
    default = sum(o for o, r in relays if r >= default_rate) / total
    print(f"{name}: {len(relays)} relays; held by tor's token bucket (rate <= {NEAR} x observed): "
          f"{len(held)} relays, {100 * share:.0f}% of the observed capacity; by their machine: "
          f"{len(relays) - len(held)} relays, {100 * (1 - share):.0f}% "
          f"({100 * default:.0f}% on relays with tor's default rate)")


rows = [(float(r["MaxObserved(KiB/s)"]), float(r["Rate(KiB/s)"])) for r in csv.DictReader(open(PATH))]
report("relays-2018", [(o, r) for o, r in rows if o > 0], 1024 * 1024)

HOST = re.compile(r'<host id="relay[^"]*"[^>]*bandwidthup="(\d+)"[^>]*>\s*<process[^>]*'
                  r'--BandwidthRate (\d+) --BandwidthBurst \d+')
for path in sys.argv[1:]:
    relays = [(int(up) * 1024.0, float(rate)) for up, rate in HOST.findall(open(path).read())]
    if not relays:
        sys.exit(f"{path}: no relay hosts with a link and a BandwidthRate")
    report(path, relays, 1 << 30)
