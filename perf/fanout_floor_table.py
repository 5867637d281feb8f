#!/usr/bin/env python3
"""The ratio table of perf/fanout_floor.sh: medians over the rounds of each server on
each workload, and every other server's ratio to the minimal one. When the minimal
server also ran on other thread counts (servers named minimal@N), a second table gives
each server's ratio to the minimal server on as many threads as it had shards.

Usage: fanout_floor_table.py RESULTS_DIR WORKLOAD...
Reads RESULTS_DIR/<workload>.<server>.<round>.json (sluice-bench --json).
"""
import glob
import json
import os
import re
import statistics
import sys


def ms(v):
    if v is None:
        return "-"
    if v >= 1e9:
        return f"{v / 1e9:.2f} s"
    if v >= 1e6:
        return f"{v / 1e6:.2f} ms"
    return f"{v / 1e3:.0f} µs"


def rate(r):
    if r is None:
        return "-"
    if r >= 1e6:
        return f"{r / 1e6:.2f} M"
    if r >= 1e3:
        return f"{r / 1e3:.1f} k"
    return f"{r:.0f}"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def threads(j):
    """The server's shard (event-loop thread) count, from sluice-bench's label."""
    found = re.search(r"(\d+) shards?", j.get("broker", {}).get("label", ""))
    return int(found.group(1)) if found else None


def figures(j):
    lat = j.get("latency", {})
    sp = j.get("spread", {})
    c = j.get("connections", {})
    base, start, peak = (c.get("broker_rss_baseline_bytes"), c.get("broker_rss_start_bytes"),
                         c.get("broker_rss_peak_bytes"))
    n = max(c.get("connections", 0) - 1, 1)
    return {
        "rate": j.get("deliver_rate"),
        "p50": lat.get("p50_ns"),
        "p99": lat.get("p99_ns"),
        "sp_min": sp.get("p99_min_ns"),
        "sp_med": sp.get("p99_median_ns"),
        "sp_max": sp.get("p99_max_ns"),
        "cpu": j.get("broker_cpu_ns_per_delivered"),
        "tool": j.get("tool_cpu_ns_per_delivered"),
        "rss": start,
        "peak": peak,
        "ever": c.get("broker_rss_highest_ever_bytes"),
        "per_sub": (start - base) / n if start and base else None,
        "per_sub_peak": (peak - base) / n if peak and base else None,
        "complete": j.get("delivered") == j.get("expected_delivered"),
        "threads": threads(j),
    }


def is_floor(server):
    return server == "minimal" or server.startswith("minimal@")


def main():
    out, works = sys.argv[1], sys.argv[2:]
    runs = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        name = os.path.basename(path)[:-5]
        try:
            work, server, rnd = name.rsplit(".", 2)
        except ValueError:
            continue
        try:
            j = json.load(open(path))
        except (OSError, json.JSONDecodeError):
            continue
        runs.setdefault((work, server), []).append(figures(j))
    servers = sorted({s for (_, s) in runs}, key=lambda s: (not is_floor(s), s != "minimal", s))
    keys = ["rate", "p50", "p99", "sp_min", "sp_med", "sp_max", "cpu", "tool", "rss", "peak",
            "ever", "per_sub", "per_sub_peak"]
    print("| workload | server | runs | delivered/s | p50 | p99 | per-sub p99 min / median / max "
          "| broker CPU ns/delivery | tool CPU ns/delivery | broker RSS with subs / peak / highest ever "
          "| RSS per sub (idle / peak) | all delivered |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---|---|---|")
    medians = {}
    for w in works:
        for s in servers:
            rs = runs.get((w, s))
            if not rs:
                continue
            m = {k: med([r[k] for r in rs]) for k in keys}
            m["threads"] = rs[0]["threads"]
            medians[(w, s)] = m
            num = lambda v: "-" if v is None else f"{v:.0f}"
            mib = lambda b: "-" if b is None else f"{b / 2**20:.0f}"
            kib = lambda b: "-" if b is None else f"{b / 1024:.1f}"
            print(f"| {w} | {s} | {len(rs)} | {rate(m['rate'])} | {ms(m['p50'])} | {ms(m['p99'])} "
                  f"| {ms(m['sp_min'])} / {ms(m['sp_med'])} / {ms(m['sp_max'])} "
                  f"| {num(m['cpu'])} | {num(m['tool'])} "
                  f"| {mib(m['rss'])} / {mib(m['peak'])} / {mib(m['ever'])} MiB | {kib(m['per_sub'])} / {kib(m['per_sub_peak'])} KiB "
                  f"| {sum(r['complete'] for r in rs)}/{len(rs)} |")
    print()
    others = [s for s in servers if not is_floor(s)]
    if not others:
        return
    ratio_table("Ratios to the minimal server (medians):", works, others, medians,
                lambda w, s: medians.get((w, "minimal")))
    floor_threads = {m["threads"] for (w, s), m in medians.items() if is_floor(s)}
    if len(floor_threads) > 1:
        def same_threads(w, s):
            t = medians[(w, s)]["threads"]
            return next((m for (w2, f), m in medians.items()
                         if w2 == w and is_floor(f) and m["threads"] == t), None)
        print()
        ratio_table("Ratios to the minimal server on as many threads as the server's shards "
                    "(medians):", works, others, medians, same_threads)


def ratio_table(title, works, others, medians, floor_of):
    """One row per workload and server: its figures over those of `floor_of(w, s)`."""
    print(title)
    print()
    print("| workload | server | threads | p50 | p99 | CPU per delivery | RSS with subs "
          "| peak RSS vs 2 × minimal + 30 MiB "
          "| highest ever (VmHWM, disconnect included) vs 2 × minimal's + 30 MiB | delivered/s |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|---:|")

    def ratio(a, b):
        return "-" if a is None or not b else f"{a / b:.2f}"

    for w in works:
        for s in others:
            m = medians.get((w, s))
            if not m:
                continue
            base = floor_of(w, s)
            if not base:
                continue
            budget = None if base["peak"] is None else 2 * base["peak"] + 30 * 2**20
            within = "-" if budget is None or m["peak"] is None else (
                f"{m['peak'] / 2**20:.0f} vs {budget / 2**20:.0f} MiB")
            ever_budget = None if base["ever"] is None else 2 * base["ever"] + 30 * 2**20
            ever = "-" if ever_budget is None or m["ever"] is None else (
                f"{m['ever'] / 2**20:.0f} vs {ever_budget / 2**20:.0f} MiB")
            shown = "-" if m["threads"] is None else f"{m['threads']} vs {base['threads']}"
            print(f"| {w} | {s} | {shown} | {ratio(m['p50'], base['p50'])} "
                  f"| {ratio(m['p99'], base['p99'])} "
                  f"| {ratio(m['cpu'], base['cpu'])} | {ratio(m['rss'], base['rss'])} | {within} | {ever} "
                  f"| {ratio(m['rate'], base['rate'])} |")

if __name__ == "__main__":
    main()
