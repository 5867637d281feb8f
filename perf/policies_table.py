"""Summarises a perf/policies.sh run (the JSON files sluice-bench wrote) as markdown."""
import glob
import json
import os
import sys

out, rev, load = sys.argv[1], sys.argv[2], sys.argv[3]


def mib(b):
    return f"{b / 2**20:.0f} MiB" if b else "-"


def rate(r):
    if r is None:
        return "-"
    return f"{r/1e6:.2f}M" if r >= 1e6 else (f"{r/1e3:.1f}k" if r >= 1e3 else f"{r:.0f}")


def ms(ns):
    return "-" if not ns else f"{ns/1e6:.1f} ms"


runs = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    name, broker = os.path.basename(f)[:-5].rsplit(".", 1)
    runs[(name, broker)] = json.load(open(f))
if not runs:
    sys.exit("no results")
first = next(iter(runs.values()))
print(f"Run {first['date_utc']} at sluice {rev}, {first['machine_cores']} cores, load average at the end {load}.\n")


def rss_series(j, every=10):
    pts = [p for p in j.get("timeline", []) if p.get("broker_rss")]
    return " ".join(mib(p["broker_rss"]).replace(" MiB", "") for p in pts[::every]) + " MiB" if pts else "-"


print("### Slow subscribers (slowsub, heavy)\n")
print("| run | broker | published/s | fast subs | fast delivered/s per sub | fast p99 | slow subs: outcome | broker CPU ns/delivery | broker RSS min–max (window) | RSS every 10 s |")
print("|---|---|---:|---:|---:|---:|---|---:|---|---|")
for (name, broker), j in runs.items():
    if not (name.startswith("slowsub") or name.startswith("heavy")):
        continue
    fast, slow = j.get("fast") or {}, j.get("slow") or {}
    closed = sum(1 for s in j.get("subscribers", []) if s.get("slow") and s.get("closed_code") == 506)
    gaps = sum(s.get("gaps", 0) for s in j.get("subscribers", []) if s.get("slow"))
    fast_closed = sum(1 for s in j.get("subscribers", []) if not s.get("slow") and s.get("closed_code"))
    nslow = slow.get("subscribers", 0)
    outcome = "-" if not nslow else f"{closed}/{nslow} closed 506, {gaps} discarded"
    if fast_closed:
        outcome += f"; {fast_closed} FAST closed"
    print(f"| {name} | {broker} | {rate(j.get('publish_rate'))} | {fast.get('subscribers', '-')} | "
          f"{rate(fast.get('deliver_rate_per_subscriber'))} | {ms((fast.get('latency') or {}).get('p99_ns'))} | {outcome} | "
          f"{j.get('broker_cpu_ns_per_delivered', 0):.0f} | {mib(j.get('broker_rss_window_min_bytes'))}–{mib(j.get('broker_rss_window_max_bytes'))} | {rss_series(j)} |")

print("\n### Producer flow control (capacity 10 MiB, resume 8 MiB)\n")
print("| run | published/s | consumer rate | queue messages min–max | queue bytes max | publisher time held by flow | publisher time not read (held by broker) | channel.flow stops | broker RSS min–max |")
print("|---|---:|---:|---|---:|---:|---:|---:|---|")
for (name, broker), j in runs.items():
    if not name.startswith("capacity"):
        continue
    size = j.get("config", {}).get("size", 1024)
    qmin, qmax = j.get("queue_messages_min"), j.get("queue_messages_max")
    cal = (j.get("calibration") or {}).get("slow_rate") or j.get("config", {}).get("slow_rate")
    print(f"| {name} | {rate(j.get('publish_rate'))} | {rate(cal)} msg/s | {qmin}–{qmax} | "
          f"{mib((qmax or 0) * size)} | {j.get('flow_held_ms', 0)/1000:.1f} s | {j.get('send_blocked_ms', 0)/1000:.1f} s | "
          f"{j.get('flow_channel_stops', 0)} | {mib(j.get('broker_rss_window_min_bytes'))}–{mib(j.get('broker_rss_window_max_bytes'))} |")

print("\n### Open-loop flood (1->16, 64 B, no-ack, publisher unpaced)\n")
print("| run | published/s | delivered/s | p50 | broker RSS min–max (window) | RSS every 10 s | broker log codes |")
print("|---|---:|---:|---:|---|---|---|")
for (name, broker), j in runs.items():
    if not name.startswith("flood"):
        continue
    codes = ", ".join(f"{k} x{v}" for k, v in sorted((j.get("broker_log_codes") or {}).items()) if k.startswith(("BRK-100", "CON-100", "CHN-100")))
    print(f"| {name} | {rate(j.get('publish_rate'))} | {rate(j.get('deliver_rate'))} | {ms(j['latency'].get('p50_ns'))} | "
          f"{mib(j.get('broker_rss_window_min_bytes'))}–{mib(j.get('broker_rss_window_max_bytes'))} | {rss_series(j)} | {codes} |")
