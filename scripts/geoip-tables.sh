#!/usr/bin/env bash
# Writes the IPv4 country tables of data/geoip/ from a clone of tor's git repository, which
# shipped one in src/config/geoip (tor's geoip format: first address, last address, country)
# and updated it every month or so. Each table is the one tor shipped nearest the day of one of
# onionlab's shipped consensuses, as tor's repository holds it; the tables tor shipped before
# March 2021 (MaxMind's) are not in public clones of it any more, so the 2019 consensus gets the
# oldest table that is.
#
# Usage: scripts/geoip-tables.sh PATH-TO-TOR-GIT-DIR
set -euo pipefail
tor=${1:?usage: scripts/geoip-tables.sh PATH-TO-TOR-GIT-DIR}
out=$(dirname "$0")/../data/geoip
mkdir -p "$out"
# commit in tor's repository, the date of the IPFire export it converted
for entry in a7b3cb06f5:2021-03-12 ec0414270a:2022-12-06 c2c6c7a5e6:2023-06-01; do
    commit=${entry%%:*} day=${entry#*:}
    git --git-dir "$tor" show "$commit:src/config/geoip" | xz -9e > "$out/geoip-$day.xz"
    echo "data/geoip/geoip-$day.xz: $(xz -dc "$out/geoip-$day.xz" | grep -c '^[0-9]') ranges"
done
