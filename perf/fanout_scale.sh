#!/usr/bin/env bash
# Issue 9's heavy fan-out workloads against an embedded sluice (--shards 2, its own
# process, so broker and tool CPU are measured apart), 64-byte messages, no-ack,
# subscribers on sluice-bench's wire client (one connection each, multiplexed on the
# tool's two runtime threads):
#
#   fanout-1k      1 -> 1,000 subscribers at 1,000 msg/s
#   fanout-10k     1 -> 10,000 subscribers at 100 msg/s, RSS after they disconnect
#   fanout-16-max  1 -> 16 subscribers, closed-loop max rate (--max-backlog 10000)
#   idle-10k       10,000 idle connections (login + one channel)
#   fanout-1k-100  1 -> 1,000 subscribers at 100 msg/s (the load RabbitMQ was tried with)
#   topics-100x100 100 topics x 100 subscribers, closed-loop max rate; each
#                  subscriber sees ~1 % of the stream, so the backlog is capped at
#                  100 messages per subscriber (the default 10,000 would be ~100 s
#                  of backlog: the loop would never close within the run)
#
# With RabbitMQ installed (perf/rabbit.sh; RABBIT=0 skips it), fanout-1k-100 and
# fanout-1k also run against a throw-away RabbitMQ node with the same client, as
# rabbitmq-fanout-1k-100 and rabbitmq-fanout-1k (RabbitMQ needs about a minute just to
# set up 10,000 queues, so the 10,000-connection runs are sluice only).
#
# Each run is bounded: SIGINT after RUN_LIMIT seconds (the tool then reports what it
# has), SIGKILL 10 s later. Writes perf/results/<stamp>-scale/<workload>.json and
# .txt, and prints (and writes table.md) a markdown table.
#
# Usage: perf/fanout_scale.sh [--only NAME] [--duration S] [--warmup S] [--no-build]
# Environment: CARGO_TARGET_DIR (default ./target), RUN_LIMIT (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
ONLY=""
DURATION=8
WARMUP=2
BUILD=1
RUN_LIMIT="${RUN_LIMIT:-30}"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ "$BUILD" = 1 ]; then
  cargo build --release --bin sluice -p sluice >&2
  cargo build --release -p sluice-bench >&2
fi
BENCH="$CARGO_TARGET_DIR/release/sluice-bench"
[ -x "$CARGO_TARGET_DIR/release/sluice" ] || { echo "no sluice binary in $CARGO_TARGET_DIR/release" >&2; exit 2; }
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="perf/results/$STAMP-scale"
mkdir -p "$OUT"
COMMON=(--embedded process --shards 2 --size 64 --ack no-ack --quiet
        --subscriber-client wire --duration "$DURATION" --warmup "$WARMUP"
        --drain-timeout 5)
echo "load before: $(uptime)" | tee "$OUT/load.txt" >&2

run() {
  local name="$1"; shift
  if [ -n "$ONLY" ] && [ "$ONLY" != "$name" ]; then return 0; fi
  echo "== $name: sluice-bench $*" >&2
  local t0=$SECONDS
  if ! timeout -s INT -k 10 "$RUN_LIMIT" "$BENCH" "$@" --json "$OUT/$name.json" \
      > "$OUT/$name.txt" 2>&1; then
    echo "   $name failed or was cut at ${RUN_LIMIT} s (see $OUT/$name.txt)" >&2
  fi
  echo "   $((SECONDS - t0)) s" >&2
}

run fanout-1k fanout "${COMMON[@]}" --subscribers 1000 --rate 1000
run fanout-10k fanout "${COMMON[@]}" --subscribers 10000 --rate 100 --settle 3
run fanout-16-max fanout "${COMMON[@]}" --subscribers 16 --max-backlog 10000
run idle-10k idle --embedded process --shards 2 --quiet --connections 10000 \
  --duration 3 --settle 3
run topics-100x100 fanout "${COMMON[@]}" --subscribers 10000 --topics 100 \
  --max-backlog 100 --settle 3
run fanout-1k-100 fanout "${COMMON[@]}" --subscribers 1000 --rate 100

. perf/rabbit.sh
if rabbit_available && { [ -z "$ONLY" ] || [[ "$ONLY" == rabbitmq-* ]]; }; then
  rabbit_start
  trap rabbit_stop EXIT
  RCOMMON=(--url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" --broker-pid "$RABBIT_PID"
           --size 64 --ack no-ack --quiet --subscriber-client wire --duration "$DURATION"
           --warmup "$WARMUP" --drain-timeout 20 --settle 0)
  run rabbitmq-fanout-1k-100 fanout "${RCOMMON[@]}" --subscribers 1000 --rate 100
  run rabbitmq-fanout-1k fanout "${RCOMMON[@]}" --subscribers 1000 --rate 1000
  rabbit_stop
  trap - EXIT
fi

echo "load after: $(uptime)" | tee -a "$OUT/load.txt" >&2
python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, os, sys
out = sys.argv[1]
order = ["fanout-1k", "rabbitmq-fanout-1k", "fanout-1k-100", "rabbitmq-fanout-1k-100",
         "fanout-10k", "fanout-16-max", "idle-10k", "topics-100x100"]
def ns(v):
    if not v: return "-"
    if v >= 1e9: return f"{v/1e9:.2f} s"
    if v >= 1e6: return f"{v/1e6:.1f} ms"
    if v >= 1e3: return f"{v/1e3:.0f} µs"
    return f"{v:.0f} ns"
def rate(r):
    if r is None: return "-"
    if r >= 1e6: return f"{r/1e6:.2f} M"
    if r >= 1e3: return f"{r/1e3:.1f} k"
    return f"{r:.0f}"
def mib(b):
    return "-" if not b else f"{b/2**20:.0f} MiB"
def kib(b):
    return "-" if b is None else f"{b/1024:.0f} KiB"
print("| workload | connections | publish rate | delivered/s | p50 | p99 | per-sub p99 min / median / max "
      "| delivered per sub min / max | delivered / expected | broker CPU ns/delivery | tool CPU ns/delivery "
      "| broker RSS before / with subscribers / peak / after they left (growth given back) | RSS per connection | CPU cores broker / tool |")
print("|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|---:|---|")
for name in order:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        continue
    j = json.load(open(path))
    c = j.get("connections", {})
    after = c.get("broker_rss_after_disconnect_bytes")
    before = c.get("broker_rss_baseline_bytes")
    peak = c.get("broker_rss_peak_bytes")
    rss = f"{mib(before)} / {mib(c.get('broker_rss_start_bytes'))} / {mib(peak)} / {mib(after)}"
    if after and before and peak and peak > before:
        rss += f" ({100 * (peak - after) / (peak - before):.0f} %)"
    per = kib(c.get("broker_rss_per_connection_bytes"))
    conns = f"{c.get('connections', 0):,}"
    if name.startswith("idle"):
        print(f"| {name} | {conns} | - | - | - | - | - | - | - | - | - | {rss} | {per} | - |")
        continue
    l = j["latency"]; s = j.get("spread", {})
    cpu = j.get("broker_cpu_ns_per_delivered")
    print(f"| {name} | {conns} | {rate(j['publish_rate'])}/s | {rate(j['deliver_rate'])} | {ns(l['p50_ns'])} | {ns(l['p99_ns'])} "
          f"| {ns(s.get('p99_min_ns'))} / {ns(s.get('p99_median_ns'))} / {ns(s.get('p99_max_ns'))} "
          f"| {s.get('delivered_min', 0):,} / {s.get('delivered_max', 0):,} | {j['delivered']:,} / {j['expected_delivered']:,} "
          f"| {'-' if cpu is None else f'{cpu:.0f}'} | {j.get('tool_cpu_ns_per_delivered', 0):.0f} | {rss} | {per} "
          f"| {j.get('broker_cpu_cores') or 0:.2f} / {j.get('tool_cpu_cores', 0):.2f} |")
print()
print(f"JSON and summaries: {out}/. Setup times: " + ", ".join(
    f"{n} {json.load(open(os.path.join(out, n + '.json'))).get('connections', {}).get('setup_s', 0):.1f} s"
    for n in order if os.path.exists(os.path.join(out, n + ".json"))))
PY
