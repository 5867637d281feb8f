#!/usr/bin/env bash
# Instructions per delivery on sluice's fan-out hot path (issue 23), counted by
# valgrind's callgrind, which is exact and does not depend on the machine's load.
#
# Starts `sluice --shards $SHARDS` under callgrind with instrumentation off, drives it with
# sluice-bench's 1 -> $SUBS fanout (64 B, no-ack, wire-client subscribers), switches
# collection on (callgrind_control -i on) for the run only, stops the broker, and
# prints user-space instructions per delivered message (total Ir / delivered), that split
# into the work per delivery and per write-pass visit (perf/callgrind_split.py), and the
# top functions (inclusive and self).
#
# Usage: perf/callgrind_fanout.sh [BINARY] [LOAD FLAGS...]
#   BINARY    default target/release/sluice
#   LOAD      default: --max-backlog 2000 --max-messages 20000 (closed loop);
#             e.g. --rate 2000 --max-messages 20000 for a fixed rate
# Environment: SUBS (subscribers, default 16), SHARDS (1), PORT (5699), OUT (directory
# for the .cg file, default /tmp/sluice-callgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/sluice}"
shift || true
LOAD=("$@")
[ ${#LOAD[@]} -eq 0 ] && LOAD=(--max-backlog 2000 --max-messages 20000)
PORT="${PORT:-5699}"
SUBS="${SUBS:-16}"
SHARDS="${SHARDS:-1}"
OUT="${OUT:-/tmp/sluice-callgrind}"
mkdir -p "$OUT"
CG="$OUT/sluice.$(basename "$BIN").$$.cg"
DATA="$(mktemp -d /tmp/sluice-callgrind-data.XXXXXX)"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$CG" \
  "$BIN" --listen "127.0.0.1:$PORT" --shards "$SHARDS" --http-listen off --data-dir "$DATA" \
  > "$OUT/broker.log" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 600); do grep -q BRK-1004 "$OUT/broker.log" && break; sleep 0.1; done
JSON="$OUT/load.json"
callgrind_control -i on "$PID" > /dev/null
target/release/sluice-bench fanout --url "amqp://guest:guest@127.0.0.1:$PORT/" \
  --subscribers "$SUBS" --size 64 --ack no-ack --subscriber-client wire --warmup 0 \
  --duration 120 --drain-timeout 60 --settle 0 --quiet "${LOAD[@]}" --json "$JSON" > "$OUT/load.txt" 2>&1
callgrind_control -i off "$PID" > /dev/null
kill -INT "$PID"
wait "$PID" 2>/dev/null || true
trap 'rm -rf "$DATA"' EXIT
DELIVERED="$(python3 -c "import json; print(json.load(open('$JSON'))['delivered'])")"
IR="$(grep -m1 "Collected :" "$OUT/broker.log" | awk "{print \$NF}")"
echo "binary $BIN; $SUBS subscribers, $SHARDS shard(s); load ${LOAD[*]}; delivered $DELIVERED; Ir $IR"
python3 -c "print(f'instructions per delivery: {$IR / $DELIVERED:.0f}')"
echo "callgrind output: $CG"
python3 perf/callgrind_split.py "$CG" "$DELIVERED"
(callgrind_annotate --inclusive=yes "$CG" 2>/dev/null || true) | sed -n '/file:function/,$p' | head -45 || true
(callgrind_annotate "$CG" 2>/dev/null || true) | sed -n '/file:function/,$p' | head -45 || true
