#!/usr/bin/env bash
# Issue 25's figures: one stream read by N readers against N queues bound to a topic, at
# the same publish rate, on an embedded sluice (--shards 2, its own process, so broker and
# tool CPU are measured apart), 64-byte messages, every subscriber its own connection on
# sluice-bench's wire client, manual acks with prefetch 1,000 on both sides (a stream's
# readers must ack; the queues' subscribers do the same, so the two do the same work on
# the wire):
#
#   queues-1k        1 -> 1,000 queues bound to a topic, 1,000 msg/s
#   stream-1k        1 -> 1 stream <- 1,000 readers at `next`, 1,000 msg/s
#   queues-10k       1 -> 10,000 queues, RATE_10K msg/s (default 100)
#   stream-10k       1 -> 1 stream <- 10,000 readers, RATE_10K msg/s
#   tail             1 -> 1 stream <- 100 readers at 1,000 msg/s after a 1 GiB prefill
#                    (64 KiB messages, with confirms: the prefill's rate is reported)
#   tail-replay      the same with one more reader replaying the 1 GiB from `first`,
#                    pass after pass, through the whole run (its rate reported apart;
#                    the tail's latency is the 100 readers' alone)
#   confirms-stream  1 publisher, 1 KiB messages, 1,000 confirms in flight, into a
#                    stream, no reader: publish throughput with confirms
#   confirms-queue   the same into a durable classic queue, persistent messages
#   queues-1k-100, stream-1k-100   1,000 queues / 1,000 readers at 100 msg/s, and the
#                    same against RabbitMQ when it is installed (rabbitmq-*), with
#                    rabbitmq-confirms-stream
#
# Disk: each stream run keeps its stream (--keep-queue) on a data dir of its own, whose
# streams/ directory is measured (du) after the tool and its broker have ended; the
# queue runs hold nothing on disk (exclusive, non-durable queues).
#
# Each run is bounded: SIGINT after RUN_LIMIT seconds (the tool then reports what it
# has), SIGKILL 10 s later. Writes perf/results/<stamp>-streams/<workload>.json and
# .txt, and prints (and writes table.md) a markdown table.
#
# Usage: perf/streams.sh [--only NAME[,NAME…]] [--duration S] [--warmup S] [--no-build]
# Environment: CARGO_TARGET_DIR (default ./target), RUN_LIMIT (default 120), RATE_10K
# (default 100), PREFILL (bytes, default 1073741824).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
ONLY=""
DURATION=8
WARMUP=2
BUILD=1
RUN_LIMIT="${RUN_LIMIT:-120}"
RATE_10K="${RATE_10K:-100}"
PREFILL="${PREFILL:-1073741824}"
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
OUT="perf/results/$STAMP-streams"
mkdir -p "$OUT"
COMMON=(--embedded process --shards 2 --size 64 --ack client --prefetch 1000 --quiet
        --subscriber-client wire --duration "$DURATION" --warmup "$WARMUP"
        --drain-timeout 10)
echo "load before: $(uptime)" | tee "$OUT/load.txt" >&2

run() {
  local name="$1"; shift
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then return 0; fi
  local data
  data="$(mktemp -d "${TMPDIR:-/tmp}/sluice-perf-streams-XXXXXX")"
  echo "== $name: sluice-bench $* --broker-arg=--data-dir=$data" >&2
  local t0=$SECONDS
  if ! timeout -s INT -k 10 "$RUN_LIMIT" "$BENCH" "$@" --broker-arg="--data-dir=$data" \
      --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1; then
    echo "   $name failed or was cut at ${RUN_LIMIT} s (see $OUT/$name.txt)" >&2
  fi
  echo "   $((SECONDS - t0)) s; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  echo "$name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
  # What the run left on disk: the streams' segments, the queues' segments.
  local streams messages
  streams=$(du -sb "$data/streams" 2>/dev/null | cut -f1 || true)
  messages=$(du -sb "$data/messages" 2>/dev/null | cut -f1 || true)
  echo "{\"streams_bytes\": ${streams:-0}, \"messages_bytes\": ${messages:-0}}" > "$OUT/$name.disk.json"
  rm -rf "$data"
}

run queues-1k fanout "${COMMON[@]}" --subscribers 1000 --rate 1000
run stream-1k streams "${COMMON[@]}" --subscribers 1000 --rate 1000 --keep-queue
run queues-10k fanout "${COMMON[@]}" --subscribers 10000 --rate "$RATE_10K" --settle 3
run stream-10k streams "${COMMON[@]}" --subscribers 10000 --rate "$RATE_10K" --settle 3 \
  --keep-queue
run tail streams "${COMMON[@]}" --subscribers 100 --rate 1000 --prefill-bytes "$PREFILL" \
  --keep-queue
run tail-replay streams "${COMMON[@]}" --subscribers 100 --rate 1000 \
  --prefill-bytes "$PREFILL" --replay --keep-queue
CONFIRMS=(--embedded process --shards 2 --size 1024 --confirm 1000 --quiet
          --duration "$DURATION" --warmup "$WARMUP" --open-loop)
run confirms-stream streams "${CONFIRMS[@]}" --subscribers 0 --keep-queue
run confirms-queue persistent "${CONFIRMS[@]}" --consumers 0 --keep-queue

# Side by side with RabbitMQ (perf/rabbit.sh; RABBIT=0 skips it): 1,000 readers of a
# stream and 1,000 queues at 100 msg/s (RabbitMQ's own ceiling on this machine is about
# 46 k deliveries/s with this client: perf/RESULTS.md, issue 9), and publishing into a
# stream with confirms; sluice's stream-1k-100 and queues-1k-100 are the same runs.
run queues-1k-100 fanout "${COMMON[@]}" --subscribers 1000 --rate 100
run stream-1k-100 streams "${COMMON[@]}" --subscribers 1000 --rate 100 --keep-queue
. perf/rabbit.sh
if rabbit_available && { [ -z "$ONLY" ] || [[ ",$ONLY" == *",rabbitmq-"* ]]; }; then
  rabbit_start
  trap rabbit_stop EXIT
  RCOMMON=(--url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" --broker-pid "$RABBIT_PID"
           --size 64 --ack client --prefetch 1000 --quiet --subscriber-client wire
           --duration "$DURATION" --warmup "$WARMUP" --drain-timeout 20 --settle 0)
  run rabbitmq-queues-1k-100 fanout "${RCOMMON[@]}" --subscribers 1000 --rate 100
  run rabbitmq-stream-1k-100 streams "${RCOMMON[@]}" --subscribers 1000 --rate 100
  run rabbitmq-confirms-stream streams --url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" \
    --broker-pid "$RABBIT_PID" --size 1024 --confirm 1000 --quiet --duration "$DURATION" \
    --warmup "$WARMUP" --open-loop --subscribers 0
  rabbit_stop
  trap - EXIT
fi

echo "load after: $(uptime)" | tee -a "$OUT/load.txt" >&2
python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, os, sys
out = sys.argv[1]
order = ["queues-1k", "stream-1k", "queues-10k", "stream-10k", "tail", "tail-replay",
         "confirms-stream", "confirms-queue", "queues-1k-100", "stream-1k-100",
         "rabbitmq-queues-1k-100", "rabbitmq-stream-1k-100", "rabbitmq-confirms-stream"]
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
print("| workload | connections | publish rate | delivered/s | p50 | p99 | per-sub p99 median / max "
      "| delivered / expected | broker CPU ns/delivery | broker cores | broker RSS in the window min / max "
      "| disk (streams / queue segments) |")
print("|---|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|")
for name in order:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        continue
    j = json.load(open(path))
    c = j.get("connections", {})
    d = {}
    dpath = os.path.join(out, name + ".disk.json")
    if os.path.exists(dpath):
        d = json.load(open(dpath))
    l = j["latency"]; s = j.get("spread", {})
    cpu = j.get("broker_cpu_ns_per_delivered")
    conf = j.get("confirm_latency")
    p50, p99 = l.get("p50_ns"), l.get("p99_ns")
    if name.startswith("confirms") and conf:
        p50, p99 = conf.get("p50_ns"), conf.get("p99_ns")
    print(f"| {name} | {c.get('connections', 0):,} | {rate(j['publish_rate'])}/s | {rate(j['deliver_rate'])} "
          f"| {ns(p50)} | {ns(p99)} | {ns(s.get('p99_median_ns'))} / {ns(s.get('p99_max_ns'))} "
          f"| {j['delivered']:,} / {j['expected_delivered']:,} "
          f"| {'-' if cpu is None else f'{cpu:.0f}'} | {j.get('broker_cpu_cores') or 0:.2f} "
          f"| {mib(j.get('broker_rss_window_min_bytes'))} / {mib(j.get('broker_rss_window_max_bytes'))} "
          f"| {mib(d.get('streams_bytes'))} / {mib(d.get('messages_bytes'))} |")
    for note in j.get("notes", []):
        if note.startswith(("prefill", "replay")):
            print(f"|  | {note} |||||||||||")
print()
print(f"JSON and summaries: {out}/; load averages in {out}/load.txt.")
PY
