#!/usr/bin/env bash
# What the web console (issue 22) costs the broker: one release broker on loopback with
# QUEUES queues (TOPIC of them topic subscriptions bound to amq.topic, so they have the
# vhost's slow-consumer policy and show on "subscriptions at risk"), then SAMPLE seconds
# of its CPU with nobody looking and with 1 and VIEWERS viewers on each page. A viewer
# is a loop making exactly the requests the page makes every 5 s (src/http/console/
# assets: app.js asks /api/nodes on every page, then the page its own):
#   overview  /api/overview (its shard_details give the per-shard figures)
#   risk      /api/queues?columns=… (every queue: the page sorts by prediction)
#   queues    /api/queues?page=1&page_size=50&sort=name&columns=… (one page)
# A browser tab in the background asks nothing (the page polls only while visible), so
# "nobody looking" is also what a forgotten tab costs.
# Usage: perf/console_cost.sh
# Environment: QUEUES (10000), TOPIC (1000), SHARDS (2), SAMPLE (30), VIEWERS (10),
#   PAGES ("overview risk queues"),
#   PORT (5891), HTTP_PORT (15891). Results print as `RESULT key=value ...` lines.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin sluice -p sluice >&2
BIN="$CARGO_TARGET_DIR/release/sluice"
QUEUES="${QUEUES:-10000}"
TOPIC="${TOPIC:-1000}"
SHARDS="${SHARDS:-2}"
SAMPLE="${SAMPLE:-30}"
VIEWERS="${VIEWERS:-10}"
PORT="${PORT:-5891}"
HTTP_PORT="${HTTP_PORT:-15891}"
WORK="$(mktemp -d /tmp/sluice-console-cost.XXXXXX)"
API="http://127.0.0.1:$HTTP_PORT/api"
PID=""
VIEWER_PIDS=()
cleanup() {
  for v in "${VIEWER_PIDS[@]}"; do kill "$v" 2>/dev/null || true; done
  [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 1" INT TERM

cat > "$WORK/sluice.toml" <<EOF
[vhost."/".slow_consumer]
policy = "cycle"
max_count = 10000
EOF
"$BIN" --config "$WORK/sluice.toml" --shards "$SHARDS" --data-dir "$WORK/data" \
  --listen "127.0.0.1:$PORT" --http-listen "127.0.0.1:$HTTP_PORT" \
  > "$WORK/broker.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
  curl -sf -u guest:guest "$API/overview" > /dev/null && break
  sleep 0.1
done
curl -sf -u guest:guest "$API/overview" > /dev/null \
  || { echo "broker did not start: $(tail -5 "$WORK/broker.log")" >&2; exit 1; }

# QUEUES queues over keep-alive curls; the first TOPIC bound to amq.topic.
cfg="$WORK/curl.cfg"
: > "$cfg"
for i in $(seq -w 0 $((QUEUES - 1))); do
  printf 'user = "guest:guest"\nurl = "%s/queues/%%2F/q.%s"\nrequest = "PUT"\ndata = "{}"\noutput = "/dev/null"\nnext\n' \
    "$API" "$i" >> "$cfg"
done
for i in $(seq -w 0 $((QUEUES - 1)) | head -n "$TOPIC"); do
  printf 'user = "guest:guest"\nurl = "%s/bindings/%%2F/e/amq.topic/q/q.%s"\ndata = "{\\"routing_key\\":\\"t.%s.#\\"}"\noutput = "/dev/null"\nnext\n' \
    "$API" "$i" "$i" >> "$cfg"
done
sed -i '$d' "$cfg"
curl -s -K "$cfg"
have=$(curl -sf -u guest:guest "$API/overview" | python3 -c 'import json,sys; print(json.load(sys.stdin)["object_totals"]["queues"])')
[ "$have" = "$QUEUES" ] || { echo "expected $QUEUES queues, have $have" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
HZ=$(getconf CLK_TCK)
COLUMNS_RISK='name,vhost,messages,message_bytes,consumers,oldest_message_age_seconds,discarded,slow_consumer'
COLUMNS_QUEUES='name,vhost,durable,auto_delete,exclusive,messages,messages_ready,messages_unacknowledged,message_bytes,consumers,message_stats,flow,slow_consumer,home_shard,policy'

# viewer PAGE: the page's requests every 5 s, each request's time appended to
# $WORK/times.PAGE (seconds).
viewer() {
  local page="$1" urls
  case "$page" in
    overview) urls=("$API/nodes" "$API/overview") ;;
    risk) urls=("$API/nodes" "$API/queues?columns=$COLUMNS_RISK") ;;
    queues) urls=("$API/nodes" "$API/queues?page=1&page_size=50&sort=name&columns=$COLUMNS_QUEUES") ;;
  esac
  while true; do
    for u in "${urls[@]}"; do
      curl -s -o /dev/null -w '%{time_total}\n' -u guest:guest -H 'X-Requested-With: XMLHttpRequest' "$u" \
        >> "$WORK/times.$page"
    done
    sleep 5
  done
}

# measure NAME PAGE N: N viewers of PAGE for SAMPLE seconds.
measure() {
  local name="$1" page="$2" n="$3"
  : > "$WORK/times.$page"
  VIEWER_PIDS=()
  for _ in $(seq "$n"); do
    viewer "$page" &
    VIEWER_PIDS+=($!)
    sleep 0.$((RANDOM % 5))
  done
  local t0 c0 c1
  t0=$(date +%s%N); c0=$(cpu_ticks)
  sleep "$SAMPLE"
  c1=$(cpu_ticks)
  local dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  for v in "${VIEWER_PIDS[@]}"; do
    kill "$v" 2>/dev/null || true
    wait "$v" 2>/dev/null || true
  done
  VIEWER_PIDS=()
  local pct times
  pct=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v ms="$dt" 'BEGIN { printf "%.2f", 100 * c / hz / (ms / 1000) }')
  times=$(sort -n "$WORK/times.$page" 2>/dev/null | awk '{ a[NR] = $1 } END { if (NR) printf "requests=%d median_ms=%.1f max_ms=%.1f", NR, 1000 * a[int((NR + 1) / 2)], 1000 * a[NR]; else printf "requests=0" }')
  echo "RESULT case=$name viewers=$n broker_cpu_pct=$pct $times rss_kib=$(rss_kib)"
}

sleep 5 # the declares' aftermath settles
measure idle none 0
for page in ${PAGES:-overview risk queues}; do
  measure "$page" "$page" 1
  measure "$page" "$page" "$VIEWERS"
done
