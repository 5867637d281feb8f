#!/usr/bin/env bash
# Broker CPU and instructions per delivered message for one scenario.
#
# Usage: perf/cpu_per_msg.sh [sluice-bench scenario and flags...]
#   default: fanout --subscribers 16 --size 64 --ack no-ack
# Starts sluice (--shards 2) as its own process so its CPU is separate from the
# tool's, runs sluice-bench against it with --broker-pid, and, when `perf` is
# available, counts the broker's instructions and cycles over the same run:
# instructions per delivered message = instructions / delivered.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin sluice -p sluice >&2
cargo build --release -p sluice-bench >&2
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(fanout --subscribers 16 --size 64 --ack no-ack)
PORT="${PORT:-5699}"
"$CARGO_TARGET_DIR/release/sluice" --listen "127.0.0.1:$PORT" --shards 2 > /tmp/sluice-cpu.log 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do grep -q BRK-1004 /tmp/sluice-cpu.log && break; sleep 0.1; done
JSON="$(mktemp /tmp/cpu-per-msg.XXXXXX.json)"
if command -v perf >/dev/null 2>&1; then
  perf stat -x, -e instructions,cycles -p "$PID" -o /tmp/sluice-perf-stat.txt &
  PERF=$!
fi
"$CARGO_TARGET_DIR/release/sluice-bench" "${ARGS[@]}" --url "amqp://guest:guest@127.0.0.1:$PORT/" \
  --broker-pid "$PID" --json "$JSON" --quiet
if [ -n "${PERF:-}" ]; then kill -INT "$PERF"; wait "$PERF" 2>/dev/null || true; fi
python3 - "$JSON" <<'PY'
import json, sys, re
j = json.load(open(sys.argv[1]))
print(f"delivered in window: {j['delivered_in_window']}  broker CPU ns/delivered: {j['broker_cpu_ns_per_delivered']:.0f}  tool CPU ns/message: {j['tool_cpu_ns_per_message']:.0f}")
try:
    stat = open("/tmp/sluice-perf-stat.txt").read()
    ins = [l for l in stat.splitlines() if ",instructions" in l]
    cyc = [l for l in stat.splitlines() if ",cycles" in l]
    if ins and ins[0].split(",")[0].isdigit():
        n = int(ins[0].split(",")[0]); c = int(cyc[0].split(",")[0]) if cyc and cyc[0].split(",")[0].isdigit() else 0
        print(f"broker instructions per delivered message (whole run incl. warm-up/drain): {n / max(j['delivered'],1):.0f}; cycles: {c / max(j['delivered'],1):.0f}")
    else:
        print("perf stat gave no instruction counts (no PMU access in this VM?):\n" + stat)
except FileNotFoundError:
    pass
PY
