#!/usr/bin/env bash
# Federation benchmarks (issue 20), every broker its own process on loopback, side by
# side in one run so the figures are ratios measured in the same window.
#
# Usage: perf/federation.sh [all|tree|link|hop|bindings|relays]   (default: all)
#   tree      root -> 2 relays -> 2 x SUBS/2 subscribers vs one broker with SUBS
#             subscribers (fixed RATE): deliveries/s, latency, CPU per message of each
#             broker, RSS
#   link      link throughput at max rate (closed loop), 64 B and 1 KiB, each ack mode:
#             root -> 1 relay -> 1 subscriber
#   hop       latency added per hop at HOP_RATE msg/s: 0, 1 and 2 hops
#   bindings  time for 10,000 bindings (and unbindings) to propagate (fed-bindings)
#   relays    root CPU per publish as relays are added (1, 2, 3; one subscriber each)
# Environment: SUBS (2000), RATE (1000), HOP_RATE (10000), DURATION (10), SHARDS (2),
#   BASE_PORT (5800). Results print as lines `RESULT key=value ...`; copy them with the
#   command into perf/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin sluice -p sluice >&2
cargo build --release -p sluice-bench --bins >&2
BIN="$CARGO_TARGET_DIR/release"
WHAT="${1:-all}"
SUBS="${SUBS:-2000}"
RATE="${RATE:-1000}"
HOP_RATE="${HOP_RATE:-10000}"
DURATION="${DURATION:-10}"
SHARDS="${SHARDS:-2}"
BASE_PORT="${BASE_PORT:-5800}"
WORK="$(mktemp -d /tmp/sluice-fed-perf.XXXXXX)"
EXCHANGE="sluice.bench.fanout"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME PORT [UPSTREAM_PORT ACK_MODE MAX_HOPS]: a broker on 127.0.0.1:PORT
# (management on PORT+1000), federating $EXCHANGE from 127.0.0.1:UPSTREAM_PORT when
# given. Sets PID.
start() {
  local name=$1 port=$2 up=${3:-} ack=${4:-on-confirm} hops=${5:-1}
  local dir="$WORK/$name"
  rm -rf "$dir"   # every run starts from an empty store: no queue or binding of an earlier one
  mkdir -p "$dir/data"
  {
    echo "[broker]"
    echo "node_name = \"$name\""
    if [ -n "$up" ]; then
      echo "[[federation.upstream]]"
      echo "name = \"up\""
      echo "uri = \"amqp://guest:guest@127.0.0.1:$up/%2f\""
      echo "ack_mode = \"$ack\""
      echo "reconnect_delay = 1"
      echo "max_hops = $hops"
      echo "[[federation.exchange]]"
      echo "pattern = \"^(sluice\\\\.bench\\\\.fanout|amq\\\\.topic)\$\""
      echo "upstreams = [\"up\"]"
    fi
  } > "$dir/sluice.toml"
  "$BIN/sluice" --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$((port + 1000))" \
    --shards "$SHARDS" --data-dir "$dir/data" --config "$dir/sluice.toml" > "$dir/log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 100); do grep -q BRK-1004 "$dir/log" && return 0; sleep 0.1; done
  echo "broker $name did not start:" >&2; cat "$dir/log" >&2; exit 1
}

stop_all() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}

# CPU jiffies (user + system) of a PID.
jiffies() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
HZ=$(getconf CLK_TCK)

url() { echo "amqp://guest:guest@127.0.0.1:$1/"; }

# bench OUT.json [sluice-bench args...] with CPU of the listed PIDS_CPU sampled around it.
# A short run first declares the bench's exchange on every broker, so that each relay's
# link for it is running (FED-1002 twice: amq.topic and the bench's exchange) before the
# measured run; that run waits 1 s after its subscribers bound before it publishes.
bench() {
  local out=$1; shift
  "$BIN/sluice-bench" fanout "${URLS[@]}" --subscribers 1 --duration 0.5 --rate 10 --warmup 0 \
    --settle 0 --subscriber-client wire --ack no-ack --quiet > "$out.prime.txt" 2>&1 || true
  for f in "$WORK"/relay-*/log; do
    [ -f "$f" ] || continue
    for _ in $(seq 1 100); do [ "$(grep -c FED-1002 "$f")" -ge 2 ] && break; sleep 0.1; done
  done
  declare -gA CPU0
  for p in $PIDS_CPU; do CPU0[$p]=$(jiffies "$p"); done
  "$BIN/sluice-bench" "$@" --publish-delay 1 --json "$out" --quiet > "$out.txt" 2>&1 || { cat "$out.txt" >&2; return 1; }
  CPU_LINE=""
  for p in $PIDS_CPU; do
    CPU_LINE+=" cpu_s[$p]=$(python3 -c "print(round(($(jiffies "$p") - ${CPU0[$p]}) / $HZ, 2))") rss_mib[$p]=$(( $(rss_kib "$p") / 1024 ))"
  done
}

summary() {
  python3 - "$1" "$2" "$CPU_LINE" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); label = sys.argv[2]
l = j["latency"]
print(f"RESULT {label} published={j['published_in_window']} delivered={j['delivered_in_window']} "
      f"window_s={j['window_s']:.1f} deliver_rate={j['deliver_rate']:.0f}/s publish_rate={j['publish_rate']:.0f}/s "
      f"p50_ms={l['p50_ns']/1e6:.2f} p99_ms={l['p99_ns']/1e6:.2f} max_ms={l['max_ns']/1e6:.1f}"
      f"{sys.argv[3]}")
PY
}

wait_links() { # wait_links LOGFILE... : every relay's link is running
  for f in "$@"; do
    for _ in $(seq 1 100); do grep -q FED-1002 "$f" && break; sleep 0.1; done
    grep -q FED-1002 "$f" || { echo "link not running: $f" >&2; cat "$f" >&2; exit 1; }
  done
}

ROOT=$BASE_PORT; R1=$((BASE_PORT + 1)); R2=$((BASE_PORT + 2)); R3=$((BASE_PORT + 3))

run_tree() {
  start single "$ROOT"; PIDS_CPU="$PID"
  URLS=(--url "$(url "$ROOT")")
  bench "$WORK/single.json" fanout "${URLS[@]}" --subscribers "$SUBS" --size 64 \
    --rate "$RATE" --duration "$DURATION" --subscriber-client wire --ack no-ack
  summary "$WORK/single.json" "tree:single-broker subs=$SUBS rate=$RATE"
  stop_all
  start root "$ROOT"; ROOT_PID=$PID
  start relay-1 "$R1" "$ROOT" on-confirm; P1=$PID
  start relay-2 "$R2" "$ROOT" on-confirm; P2=$PID
  wait_links "$WORK/relay-1/log" "$WORK/relay-2/log"
  PIDS_CPU="$ROOT_PID $P1 $P2"
  URLS=(--url "$(url "$ROOT")" --subscriber-url "$(url "$R1")" --subscriber-url "$(url "$R2")")
  bench "$WORK/tree.json" fanout "${URLS[@]}" --subscribers "$SUBS" --size 64 --rate "$RATE" \
    --duration "$DURATION" --subscriber-client wire --ack no-ack
  summary "$WORK/tree.json" "tree:root+2-relays subs=$SUBS rate=$RATE pids(root,r1,r2)=$ROOT_PID,$P1,$P2"
  stop_all
}

run_link() {
  for ack in ${ACKS:-on-publish on-confirm no-ack}; do
    for size in ${SIZES:-64 1024}; do
      start root "$ROOT"; ROOT_PID=$PID
      start relay-1 "$R1" "$ROOT" "$ack"; P1=$PID
      wait_links "$WORK/relay-1/log"
      PIDS_CPU="$ROOT_PID $P1"
      URLS=(--url "$(url "$ROOT")" --subscriber-url "$(url "$R1")")
      bench "$WORK/link-$ack-$size.json" fanout "${URLS[@]}" --subscribers 1 --size "$size" --rate 0 \
        --duration "$DURATION" --subscriber-client wire --ack no-ack
      summary "$WORK/link-$ack-$size.json" "link:$ack size=$size pids(root,relay)=$ROOT_PID,$P1"
      stop_all
    done
  done
}

run_hop() {
  start root "$ROOT"; ROOT_PID=$PID
  start relay-1 "$R1" "$ROOT" on-confirm; P1=$PID
  # relay-2 federates from relay-1; a message there has made its second hop.
  start relay-2 "$R2" "$R1" on-confirm 2; P2=$PID
  wait_links "$WORK/relay-1/log" "$WORK/relay-2/log"
  PIDS_CPU="$ROOT_PID $P1 $P2"
  for hops in 0 1 2; do
    case $hops in 0) SUB=$ROOT;; 1) SUB=$R1;; 2) SUB=$R2;; esac
    URLS=(--url "$(url "$ROOT")" --subscriber-url "$(url "$SUB")")
    bench "$WORK/hop-$hops.json" fanout "${URLS[@]}" \
      --subscribers 1 --size 64 --rate "$HOP_RATE" --duration "$DURATION" --subscriber-client wire --ack no-ack
    summary "$WORK/hop-$hops.json" "hop:$hops rate=$HOP_RATE"
  done
  stop_all
}

run_bindings() {
  start root "$ROOT"; start relay-1 "$R1" "$ROOT" on-confirm
  wait_links "$WORK/relay-1/log"
  echo "RESULT bindings: $("$BIN/fed-bindings" --root "$(url "$ROOT")" --relay "$(url "$R1")" --count 10000 | tr '\n' ' ')"
  stop_all
}

run_relays() {
  for n in 1 2 3; do
    start root "$ROOT"; ROOT_PID=$PID
    SUB_ARGS=(); LOGS=()
    for i in $(seq 1 "$n"); do
      start "relay-$i" $((ROOT + i)) "$ROOT" on-confirm
      SUB_ARGS+=(--subscriber-url "$(url $((ROOT + i)))"); LOGS+=("$WORK/relay-$i/log")
    done
    wait_links "${LOGS[@]}"
    PIDS_CPU="$ROOT_PID"
    URLS=(--url "$(url "$ROOT")" "${SUB_ARGS[@]}")
    bench "$WORK/relays-$n.json" fanout "${URLS[@]}" \
      --subscribers "$n" --size 64 --rate "$HOP_RATE" --duration "$DURATION" \
      --subscriber-client wire --ack no-ack
    summary "$WORK/relays-$n.json" "relays:$n root_pid=$ROOT_PID (root CPU per publish = cpu_s / published)"
    stop_all
  done
}

case "$WHAT" in
  tree) run_tree;; link) run_link;; hop) run_hop;; bindings) run_bindings;; relays) run_relays;;
  all) run_tree; run_link; run_hop; run_bindings; run_relays;;
  *) echo "unknown: $WHAT" >&2; exit 2;;
esac
