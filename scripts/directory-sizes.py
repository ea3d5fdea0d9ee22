#!/usr/bin/env python3
"""Measures the directory documents a Tor client of 2019 fetched, for the model's directory
traffic (crates/tor/src/directory.rs).

Input: the data directory of a tor 0.4.1 client that ran on 2019-12-15, as published in the
public repository deexno/TorEagle (commit bffa8068, folder tor/): two microdescriptor-flavoured
consensuses 16 hours apart (unverified-microdesc-consensus, valid after 2019-12-14 21:00;
cached-microdesc-consensus, valid after 2019-12-15 13:00, the consensus onionlab ships as
consensus-2019-microdesc) and the microdescriptors the client held (cached-microdescs).

    python3 scripts/directory-sizes.py <path to tor/>

Needs `diff`, `xz` and `zstd`. Compression as a tor 0.4.1 cache serves it: consensus diffs are
precompressed with the client's first preference, LZMA (tor's HIGH_COMPRESSION: xz preset 6);
microdescriptors are compressed as they stream, with Zstandard (HIGH_COMPRESSION: level 9).
"""
import math
import os
import subprocess
import sys

LINE_TYPES = ("r", "m", "s", "v", "pr", "w")
# A relay republishes its descriptor at least every 18 hours (and its r line's published time
# changes with it): over 16 hours 89% of r lines changed, as 16/18 predicts.
REPUBLISH_HOURS = 18.0


def relays(path):
    out = {}
    cur = None
    for line in open(path, encoding="latin1"):
        line = line.rstrip("\n")
        kind = line.split(" ", 1)[0]
        if kind == "r":
            cur = line.split()[2]
            out[cur] = {"r": line}
        elif kind == "directory-footer":
            cur = None
        elif cur and kind in LINE_TYPES:
            out[cur][kind] = line
    return out


def compressed(data, cmd):
    return len(subprocess.run(cmd, input=data, capture_output=True, check=True).stdout)


def main(folder):
    old_path = os.path.join(folder, "unverified-microdesc-consensus")
    new_path = os.path.join(folder, "cached-microdesc-consensus")
    old, new = relays(old_path), relays(new_path)
    hours = 16.0
    both = set(old) & set(new)
    added, removed = set(new) - set(old), set(old) - set(new)
    diff = subprocess.run(["diff", "-e", old_path, new_path], capture_output=True).stdout
    diff_lines = diff.count(b"\n")
    diff_xz = compressed(diff, ["xz", "-6", "-c"])
    full = open(new_path, "rb").read()
    print(f"relays: {len(new)} (16 h earlier {len(old)}; {len(added)} joined, {len(removed)} left)")
    print(f"microdesc consensus: {len(full)} bytes, xz -6 {compressed(full, ['xz', '-6', '-c'])}")
    print(f"16-hour diff (ed script): {diff_lines} lines, {len(diff)} bytes, xz -6 {diff_xz}")
    changed = {t: sum(old[k].get(t) != new[k].get(t) for k in both) / len(both) for t in LINE_TYPES}
    print("share of relays whose line changed in 16 h: "
          + ", ".join(f"{t} {changed[t]:.3f}" for t in LINE_TYPES))
    lines_per_relay = sum(len(v) for v in new.values()) / len(new)

    def expected_lines(h):
        n = len(both)
        total = n * min(1.0, h / REPUBLISH_HOURS)
        for t in LINE_TYPES[1:]:
            rate = -math.log(max(1e-9, 1 - changed[t])) / hours
            total += n * (1 - math.exp(-rate * h))
        total += len(added) * h / hours * lines_per_relay + len(removed) * h / hours
        return total

    per_line = diff_xz / expected_lines(hours)
    for h in (1, 2, 3):
        print(f"diff over {h} h: {expected_lines(h):.0f} changed lines expected, "
              f"{expected_lines(h) * per_line:.0f} bytes compressed")
    digests_new = len({v["m"] for v in new.values()} - {v["m"] for v in old.values()})
    print(f"new microdescriptors: {digests_new} in 16 h, {digests_new / hours:.2f} per hour")
    text = open(os.path.join(folder, "cached-microdescs"), "rb").read()
    # Drop the cache's own annotations (@last-listed), which a cache does not serve.
    served = b"".join(l for l in text.splitlines(keepends=True) if not l.startswith(b"@"))
    count = text.count(b"\nonion-key") + text.startswith(b"onion-key")
    zst = compressed(served, ["zstd", "-9", "-c"])
    print(f"microdescriptors held: {count}, {len(served) / count:.1f} bytes each, "
          f"zstd -9 {zst / count:.1f} bytes each")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
