"""Figures for scripts/bench-scale.sh, read from runs' run.json and summary.txt.

  line DIR NAME                one run's figures on one line
  sizes OUT RUNS SIZE...       medians per network size (runs OUT/SIZE-2-1 ... -RUNS)
  scaling OUT RUNS CONFIG...   medians per thread configuration and ratios to the first
  series RUN_JSON [EVERY]      a run's state samples (every EVERY simulated seconds, default
                               50) with what each interval cost; works on a run under way
"""

import json
import re
import statistics
import sys


def figures(path):
    r = json.load(open(f"{path}/run.json"))
    sim, boot, wall = r["sim_seconds"], r["bootstrap_seconds"], r["wall_seconds"]
    # Wall time at the end of bootstrap, interpolated between the once-a-second samples.
    wall_at_boot = None
    prev = (0.0, 0.0)
    for w, s in r.get("progress", []):
        if s >= boot:
            (w0, s0) = prev
            wall_at_boot = w0 + (w - w0) * ((boot - s0) / (s - s0) if s > s0 else 0.0)
            break
        prev = (w, s)
    after = None
    if wall_at_boot is not None and sim > boot:
        after = (wall - wall_at_boot) / ((sim - boot) / 60)
    # What a simulated second costs once the network is loaded: events per simulated second
    # from the last state sample at least a simulated second before the final one (a run that
    # stops on a sampling instant has its final sample, taken just past the stop, a nanosecond
    # after the periodic one). run.json files before f15290c count no events.
    state = [x for x in r.get("state", []) if x.get("events")]
    events_per_sim_s_last = None
    if state:
        b = state[-1]
        earlier = [x for x in state if x["sim_s"] <= b["sim_s"] - 1.0]
        if earlier:
            a = earlier[-1]
            events_per_sim_s_last = (b["events"] - a["events"]) / (b["sim_s"] - a["sim_s"])
    goodput = None
    try:
        m = re.search(r"Total relay goodput: ([0-9.]+) MiB/s", open(f"{path}/summary.txt").read())
        goodput = float(m.group(1)) if m else None
    except OSError:
        pass
    scenario = r.get("scenario") or {}
    relays = scenario.get("relays", {})
    sample = relays.get("sample") if isinstance(relays, dict) else None
    clients = scenario.get("clients") or []
    users = 0
    for g in clients:
        markov = (g.get("workload") or {}).get("markov")
        users += g.get("count", 1) * (markov.get("users", 1) if isinstance(markov, dict) else 1)
    return {
        "relays": sample.get("count") if isinstance(sample, dict) else None,
        "client_hosts": sum(g.get("count", 1) for g in clients),
        "users": users,
        "threads": r["threads"],
        "sim_min": sim / 60,
        "wall_s": wall,
        "wall_per_sim_min": wall / (sim / 60) if sim > 0 else float("nan"),
        "wall_per_sim_min_after_bootstrap": after,
        "events": r["events"],
        "events_per_sec": r["events_per_sec"],
        "events_per_sim_s_last": events_per_sim_s_last,
        "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
        "relay_goodput_mib_s": goodput,
        "stolen": sum(w.get("stolen", 0) for w in r.get("workers", [])),
        "blocked_share": [
            round(w["blocked_s"] / (w["busy_s"] + w["blocked_s"]), 3)
            if w["busy_s"] + w["blocked_s"] > 0
            else None
            for w in r.get("workers", [])
        ],
    }


def series(path, every):
    """The state series of one run.json, one line per sample at least `every` simulated
    seconds after the last one printed, with the interval's wall seconds per simulated second,
    events per simulated and per wall second, and memory growth per simulated second: how a
    long run's cost and memory move as its network loads."""
    r = json.load(open(path))
    print(f"complete={r.get('complete')} sim_s={r.get('sim_seconds')} "
          f"wall_s={r.get('wall_seconds')} peak_rss_gib="
          f"{(r.get('peak_rss_bytes') or 0) / 2**30:.2f}")
    print("sim_s wall_s rss_gib events_m sockets pending | wall_per_sim_s events_per_sim_s_m "
          "events_per_wall_s_m mb_per_sim_s")
    last = None
    for x in r.get("state", []):
        if last is not None and x["sim_s"] < last["sim_s"] + every:
            continue
        line = (f"{x['sim_s']:.0f} {x['wall_s']:.0f} {x['rss_bytes'] / 2**30:.2f} "
                f"{x.get('events', 0) / 1e6:.0f} {x.get('sockets')} {x.get('pending_events')}")
        if last is not None:
            ds, dw = x["sim_s"] - last["sim_s"], x["wall_s"] - last["wall_s"]
            de = x.get("events", 0) - last.get("events", 0)
            line += (f" | {dw / ds:.1f} {de / ds / 1e6:.1f} {de / dw / 1e6 if dw else 0:.2f} "
                     f"{(x['rss_bytes'] - last['rss_bytes']) / ds / 1e6:.1f}")
        print(line)
        last = x


def fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    cmd = sys.argv[1]
    if cmd == "line":
        f = figures(sys.argv[2])
        print(sys.argv[3], " ".join(f"{k}={fmt(v)}" for k, v in f.items()), flush=True)
    elif cmd == "sizes":
        out, runs, sizes = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        print("size relays client_hosts users threads sim_min wall_per_sim_min "
              "wall_per_sim_min_after_bootstrap events_per_sec events_per_sim_s_last "
              "peak_rss_mib relay_goodput_mib_s "
              "(medians of", runs, "runs)")
        for size in sizes:
            fs = [figures(f"{out}/{size}-2-{i}") for i in range(1, runs + 1)]
            keys = ["sim_min", "wall_per_sim_min", "wall_per_sim_min_after_bootstrap",
                    "events_per_sec", "events_per_sim_s_last", "peak_rss_mib",
                    "relay_goodput_mib_s"]
            fixed = [fs[0][k] for k in ("relays", "client_hosts", "users", "threads")]
            print(size, *map(fmt, fixed), *(fmt(median(f[k] for f in fs)) for k in keys))
    elif cmd == "scaling":
        out, runs, configs = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        base = None
        print("threads stealing spans median_wall_s ratio_to_1_thread median_events_per_sec "
              "stolen blocked_share (medians of", runs, "interleaved runs)")
        for c in configs:
            t, *flag = c.split()
            off = flag[0].removeprefix("--no-") if flag else ""
            name = f"scaling-{t}{'-' + off if off else ''}"
            fs = [figures(f"{out}/{name}-{i}") for i in range(1, runs + 1)]
            wall = median(f["wall_s"] for f in fs)
            base = base or wall
            print(t, "off" if off == "work-stealing" else "on", "off" if off == "spans" else "on",
                  fmt(wall), f"{base / wall:.2f}",
                  fmt(median(f["events_per_sec"] for f in fs)),
                  fmt(median(f["stolen"] for f in fs)), fs[0]["blocked_share"])
    elif cmd == "series":
        series(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 50.0)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
