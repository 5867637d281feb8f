#!/usr/bin/env bash
# Run-time administration at scale (issue 21), one release broker on loopback:
#   apply     QUEUES queues with MSGS messages each; the time a PUT /api/policies
#             (max-length 2 on every queue) takes to be answered — on disk and in force
#             on every shard, each queue trimmed — and the DELETE; the broker's CPU for
#             each, and its RSS.
#   sampler   the broker's idle CPU with QUEUES queues while the management thread
#             samples the shards' counters every 5 s (RabbitMQ's default) and every
#             100 ms (the smallest interval accepted), SAMPLE seconds each.
# Usage: perf/runtime_policy.sh [all|apply|sampler]   (default: all)
# Environment: QUEUES (10000), MSGS (5), SHARDS (2), SAMPLE (20), PORT (5890),
#   HTTP_PORT (15890). Results print as `RESULT key=value ...` lines.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin sluice -p sluice >&2
BIN="$CARGO_TARGET_DIR/release/sluice"
WHAT="${1:-all}"
QUEUES="${QUEUES:-10000}"
MSGS="${MSGS:-5}"
SHARDS="${SHARDS:-2}"
SAMPLE="${SAMPLE:-20}"
PORT="${PORT:-5890}"
HTTP_PORT="${HTTP_PORT:-15890}"
WORK="$(mktemp -d /tmp/sluice-policy-perf.XXXXXX)"
API="http://127.0.0.1:$HTTP_PORT/api"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# start INTERVAL_MS: a fresh broker sampling every INTERVAL_MS.
start() {
  [ -n "$PID" ] && { kill "$PID"; wait "$PID" 2>/dev/null || true; }
  rm -rf "$WORK/data"
  printf '[http]\nstats_interval_ms = %s\n' "$1" > "$WORK/sluice.toml"
  "$BIN" --config "$WORK/sluice.toml" --shards "$SHARDS" --data-dir "$WORK/data" \
    --listen "127.0.0.1:$PORT" --http-listen "127.0.0.1:$HTTP_PORT" \
    > "$WORK/broker.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do
    curl -sf -u guest:guest "$API/overview" > /dev/null && return
    sleep 0.1
  done
  echo "broker did not start: $(tail -5 "$WORK/broker.log")" >&2
  exit 1
}

# cpu_ticks: the broker's user+system clock ticks so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# fill: QUEUES transient queues, MSGS messages each, over one keep-alive curl each
# (every transfer after a `next` names its own credentials).
fill() {
  local cfg="$WORK/curl.cfg"
  : > "$cfg"
  for i in $(seq -w 0 $((QUEUES - 1))); do
    printf 'user = "guest:guest"\nurl = "%s/queues/%%2F/q.%s"\nrequest = "PUT"\ndata = "{}"\noutput = "/dev/null"\nnext\n' \
      "$API" "$i" >> "$cfg"
  done
  sed -i '$d' "$cfg" # no empty request after the last "next"
  curl -s -K "$cfg"
  [ "$MSGS" -gt 0 ] || return 0
  : > "$cfg"
  for i in $(seq -w 0 $((QUEUES - 1))); do
    for m in $(seq "$MSGS"); do
      printf 'user = "guest:guest"\nurl = "%s/exchanges/%%2F/amq.default/publish"\ndata = "{\\"properties\\":{},\\"routing_key\\":\\"q.%s\\",\\"payload\\":\\"m%s\\",\\"payload_encoding\\":\\"string\\"}"\noutput = "/dev/null"\nnext\n' \
        "$API" "$i" "$m" >> "$cfg"
    done
  done
  sed -i '$d' "$cfg"
  curl -s -K "$cfg"
}

messages() {
  curl -sf -u guest:guest "$API/overview" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["queue_totals"]["messages"])'
}

# timed METHOD PATH [BODY]: prints "status millis cpu_ticks".
timed() {
  local t0 c0 status
  c0=$(cpu_ticks)
  t0=$(date +%s%N)
  status=$(curl -s -o /dev/null -w '%{http_code}' -u guest:guest -X "$1" ${3:+-d "$3"} "$API$2")
  echo "$status $(ms_since "$t0") $(( $(cpu_ticks) - c0 ))"
}

if [ "$WHAT" = all ] || [ "$WHAT" = apply ]; then
  start 5000
  fill
  before=$(messages)
  read -r put_status put_ms put_ticks < <(timed PUT "/policies/%2F/cap" \
    '{"pattern":"^q\\.","apply-to":"queues","definition":{"max-length":2}}')
  after=$(messages)
  read -r del_status del_ms del_ticks < <(timed DELETE "/policies/%2F/cap")
  echo "RESULT apply queues=$QUEUES shards=$SHARDS messages_before=$before messages_after=$after" \
    "put_status=$put_status put_ms=$put_ms put_cpu_ms=$((put_ticks * 10))" \
    "delete_status=$del_status delete_ms=$del_ms delete_cpu_ms=$((del_ticks * 10))" \
    "rss_kib=$(rss_kib)"
fi

if [ "$WHAT" = all ] || [ "$WHAT" = sampler ]; then
  for interval in 5000 100; do
    start "$interval"
    MSGS=0 fill
    sleep 2
    c0=$(cpu_ticks)
    sleep "$SAMPLE"
    ticks=$(( $(cpu_ticks) - c0 ))
    echo "RESULT sampler queues=$QUEUES shards=$SHARDS stats_interval_ms=$interval" \
      "idle_cpu_percent=$(awk -v t="$ticks" -v s="$SAMPLE" 'BEGIN {printf "%.2f", t / s}')" \
      "rss_kib=$(rss_kib)"
  done
fi
