#!/usr/bin/env bash
# Where the broker's time goes in a wide fan-out (issue 23), on the real machine: the
# cycles `perf record` samples in the broker process (kernel and user space, call graphs)
# for a window in the middle of a run, split by binary, and its own functions ranked.
# Complements callgrind_fanout.sh (exact instructions, no cache misses): at thousands of
# subscribers the user-space time is mostly loads waiting on memory, which only a
# sampling profile shows (`perf annotate -i FILE -s FUNCTION` then shows which load).
#
# Starts `sluice --shards $SHARDS` as its own process, drives it with sluice-bench's
# 1 -> $SUBS fanout (64 B, no-ack, wire-client subscribers, $RATE msg/s), waits until the
# subscribers are connected and the run is under way, records $WINDOW seconds, stops.
#
# Usage: perf/profile_fanout.sh [BINARY]
#   BINARY   default target/release/sluice
# Environment: SUBS (10000), RATE (100), SHARDS (2), WINDOW (10), PORT (5698),
#   OUT (directory for perf.data and the reports, default /tmp/sluice-profile).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/sluice}"
SUBS="${SUBS:-10000}"
RATE="${RATE:-100}"
SHARDS="${SHARDS:-2}"
WINDOW="${WINDOW:-10}"
PORT="${PORT:-5698}"
OUT="${OUT:-/tmp/sluice-profile}"
command -v perf > /dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
[ -x target/release/sluice-bench ] || cargo build --release -p sluice-bench >&2
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
DATA="$(mktemp -d /tmp/sluice-profile-data.XXXXXX)"
"$BIN" --listen "127.0.0.1:$PORT" --shards "$SHARDS" --http-listen off --data-dir "$DATA" \
  > "$OUT/broker.log" 2>&1 &
BROKER=$!
LOAD=""
cleanup() {
  [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null || true
  kill "$BROKER" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT
for _ in $(seq 1 600); do grep -q BRK-1004 "$OUT/broker.log" && break; sleep 0.1; done
# Set-up, warm-up and the window, with room to spare: the tool ends by itself.
DURATION=$((WINDOW + 15))
target/release/sluice-bench fanout --url "amqp://guest:guest@127.0.0.1:$PORT/" \
  --subscribers "$SUBS" --rate "$RATE" --size 64 --ack no-ack --subscriber-client wire \
  --duration "$DURATION" --warmup 2 --broker-pid "$BROKER" --quiet > "$OUT/load.txt" 2>&1 &
LOAD=$!
# Wait for every subscriber's connection, then a few seconds of the run.
for _ in $(seq 1 240); do
  n=$(ss -Htn state established "( sport = :$PORT )" | wc -l)
  [ "$n" -ge "$SUBS" ] && break
  sleep 0.5
done
sleep 5
perf record -F 2000 -g -p "$BROKER" -o "$OUT/perf.data" -- sleep "$WINDOW" > "$OUT/record.log" 2>&1
wait "$LOAD" || true
LOAD=""
echo "binary $BIN; $SUBS subscribers x $RATE msg/s, $SHARDS shard(s); ${WINDOW} s recorded"
grep -E "^latency|broker CPU" "$OUT/load.txt" || true
echo "-- samples by binary"
perf report -i "$OUT/perf.data" --no-children --sort dso -g none 2>/dev/null \
  | grep -E '^ +[0-9.]+%' | head -5
echo "-- the broker's own functions (self samples, % of all)"
perf report -i "$OUT/perf.data" --no-children --sort symbol -g none --dsos "$(basename "$BIN")" \
  2>/dev/null | grep -E '^ +[0-9.]+%' | head -25 | cut -c1-140
echo "perf data: $OUT/perf.data"
