#!/usr/bin/env bash
# Where the broker's memory goes by allocation size, under load (issue 23): mimalloc's
# own statistics, which see every allocation at full speed (heaptrack's slowdown backs
# the queues up at 10,000 subscribers). Builds sluice with mimalloc's detailed
# statistics (CFLAGS=-DMI_STAT=2, its own target directory), runs sluice-bench's
# 1 -> $SUBS fanout against it, stops the broker with SIGINT while the load still runs
# and prints mimalloc's table at exit: per size bin, the peak bytes live at once, the
# total allocated and the count. Run it at RATE=1 and at the load's rate and compare the
# peaks: the bins that grow are what the load keeps alive. Also prints VmRSS each second.
#
# Usage: perf/alloc_bins.sh
# Environment: SUBS (10000), RATE (100 msg/s), SHARDS (2), PORT (5697), RUN (25 s of
#   load before the stop), OUT (directory, default /tmp/sluice-bins).
set -euo pipefail
cd "$(dirname "$0")/.."
SUBS="${SUBS:-10000}"
RATE="${RATE:-100}"
SHARDS="${SHARDS:-2}"
PORT="${PORT:-5697}"
RUN="${RUN:-25}"
OUT="${OUT:-/tmp/sluice-bins}"
TARGET=target/mi-stat
CFLAGS="-DMI_STAT=2" cargo build --release -p sluice --bin sluice --target-dir "$TARGET" >&2
[ -x target/release/sluice-bench ] || cargo build --release -p sluice-bench >&2
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
DATA="$(mktemp -d /tmp/sluice-bins-data.XXXXXX)"
MIMALLOC_SHOW_STATS=1 "$TARGET/release/sluice" --listen "127.0.0.1:$PORT" --shards "$SHARDS" \
  --http-listen off --data-dir "$DATA" > "$OUT/broker.log" 2>&1 &
BROKER=$!
trap 'kill -9 $BROKER 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 100); do grep -q BRK-1004 "$OUT/broker.log" && break; sleep 0.1; done
target/release/sluice-bench fanout --url "amqp://guest:guest@127.0.0.1:$PORT/" \
  --subscribers "$SUBS" --rate "$RATE" --size 64 --ack no-ack --subscriber-client wire \
  --duration $((RUN + 20)) --warmup 2 --quiet > "$OUT/load.txt" 2>&1 &
LOAD=$!
RSS=""
for _ in $(seq 1 "$RUN"); do
  sleep 1
  RSS="$RSS $(( $(awk '/^VmRSS/{print $2}' "/proc/$BROKER/status") / 1024 ))"
done
HWM=$(( $(awk '/^VmHWM/{print $2}' "/proc/$BROKER/status") / 1024 ))
kill -INT "$BROKER"
wait "$BROKER" 2>/dev/null || true
kill "$LOAD" 2>/dev/null || true
wait "$LOAD" 2>/dev/null || true
echo "$SUBS subscribers x $RATE msg/s, $SHARDS shard(s): VmRSS MiB each second:$RSS; VmHWM $HWM MiB"
awk '/^ blocks /{on=1} on && /^ *(bin|binned|huge|total)/{print} /^ *total *:/{exit}' "$OUT/broker.log"
