#!/usr/bin/env bash
# Issue 23: sluice against the floor — a minimal fan-out server (sluice-bench's
# `minimal-fanout` binary: no routing, queues, flow control or accounting, each publish
# encoded once and written to every subscriber in a rolling pass) — run alternately on
# each workload in the same window, with the same client:
#
#   1k-1000    1 -> 1,000 subscribers at 1,000 msg/s
#   10k-100    1 -> 10,000 subscribers at 100 msg/s (--settle 3)
#   1k-100     1 -> 1,000 subscribers at 100 msg/s
#   16-max     1 -> 16 subscribers, closed loop at max rate, 2,000 ahead (--max-backlog 2000)
#   16-1000    1 -> 16 subscribers at 1,000 msg/s (the latency that must not get worse)
#
# Every run: its own server process started by sluice-bench (--embedded process
# --broker-bin), 64-byte bodies, no-ack, subscribers on the tool's wire client (one
# connection each, multiplexed on its two threads), DURATION s measured after WARMUP s.
# Servers (SERVERS, space-separated NAME=BINARY[:EXTRA-FLAGS], flags comma-separated):
#   minimal=target/release/minimal-fanout   (--shards $MINIMAL_SHARDS, default 1)
#   sluice=target/release/sluice            (--shards 2)
# Several sluice binaries can be compared side by side (A/B): SERVERS="minimal=… a=… b=…";
# every server whose name is not "minimal" gets --shards $SLUICE_SHARDS (default 2), unless
# its name ends in @N: "one@1=target/release/sluice two@2=target/release/sluice" runs the
# same binary on one and on two shards side by side.
# Rounds (ROUNDS, default 2) alternate the order of the servers; the table gives the
# median of the rounds and each sluice's ratio to the minimal server.
# --same-threads also runs the minimal server on $SLUICE_SHARDS threads (as the server
# "minimal@N"), and the table then adds each sluice's ratio to the minimal server on as
# many threads as it has shards: on 2 cores shared with the client's two threads and the
# publisher, a second event loop costs the floor latency too (perf/RESULTS.md, round
# fourteen), and this separates that cost from sluice's own.
#
# Usage: perf/fanout_floor.sh [--only W1,W2] [--rounds N] [--duration S] [--warmup S]
#                             [--same-threads] [--no-build]
# Writes perf/results/<stamp>-floor/<workload>.<server>.<round>.json and table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
ONLY=""
ROUNDS="${ROUNDS:-2}"
DURATION=10
WARMUP=2
BUILD=1
SAME_THREADS=0
RUN_LIMIT="${RUN_LIMIT:-60}"
MINIMAL_SHARDS="${MINIMAL_SHARDS:-1}"
SLUICE_SHARDS="${SLUICE_SHARDS:-2}"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --same-threads) SAME_THREADS=1; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ "$BUILD" = 1 ]; then
  cargo build --release --bin sluice -p sluice >&2
  cargo build --release -p sluice-bench >&2
fi
REL="$CARGO_TARGET_DIR/release"
BENCH="$REL/sluice-bench"
SERVERS="${SERVERS:-minimal=$REL/minimal-fanout sluice=$REL/sluice}"
if [ "$SAME_THREADS" = 1 ] && [ "$SLUICE_SHARDS" != "$MINIMAL_SHARDS" ]; then
  SERVERS="$SERVERS minimal@$SLUICE_SHARDS=$REL/minimal-fanout"
fi
# 10,000 subscribers: 10,000 sockets in the tool and as many in the server (the tool
# raises its soft limit to the hard one; the server inherits it).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt 10100 ]; then
  echo "ulimit -n is $(ulimit -n): the 10,000-subscriber run needs ~10,100" >&2
fi
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="perf/results/$STAMP-floor"
mkdir -p "$OUT"
echo "load before: $(uptime)" | tee "$OUT/load.txt" >&2
echo "servers: $SERVERS" > "$OUT/servers.txt"

COMMON=(fanout --embedded process --size 64 --ack no-ack --quiet --subscriber-client wire
        --duration "$DURATION" --warmup "$WARMUP" --drain-timeout 5)
declare -A WORK=(
  [1k-1000]="--subscribers 1000 --rate 1000"
  [10k-100]="--subscribers 10000 --rate 100 --settle 3"
  [1k-100]="--subscribers 1000 --rate 100"
  [16-max]="--subscribers 16 --max-backlog 2000"
  [16-1000]="--subscribers 16 --rate 1000"
)
ORDER=(1k-1000 10k-100 1k-100 16-max 16-1000)
if [ -n "$ONLY" ]; then IFS=, read -r -a ORDER <<< "$ONLY"; fi
read -r -a SERVER_LIST <<< "$SERVERS"

run_one() {
  local work="$1" spec="$2" round="$3"
  local name="${spec%%=*}" rest="${spec#*=}"
  local bin="${rest%%:*}" extra=""
  [ "$rest" != "$bin" ] && extra="${rest#*:}"
  local shards="$SLUICE_SHARDS"
  [ "$name" = minimal ] && shards="$MINIMAL_SHARDS"
  [[ "$name" == *@* ]] && shards="${name##*@}"
  local flags=()
  if [ -n "$extra" ]; then
    IFS=, read -r -a xs <<< "$extra"
    for x in "${xs[@]}"; do flags+=("--broker-arg=$x"); done
  fi
  local base="$OUT/$work.$name.$round"
  # shellcheck disable=SC2086
  if ! timeout -s INT -k 10 "$RUN_LIMIT" "$BENCH" "${COMMON[@]}" ${WORK[$work]} \
      --broker-bin "$bin" --shards "$shards" "${flags[@]}" --json "$base.json" \
      > "$base.txt" 2>&1; then
    echo "   $work $name round $round failed or was cut (see $base.txt)" >&2
  fi
  echo "   $work $name round $round: $(grep -m1 -E '^deliver latency|^latency' "$base.txt" || true)" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for work in "${ORDER[@]}"; do
    [ -n "${WORK[$work]:-}" ] || { echo "unknown workload $work" >&2; exit 2; }
    echo "== round $round: $work ($(uptime | sed 's/.*load/load/'))" >&2
    if [ $((round % 2)) = 1 ]; then
      list=("${SERVER_LIST[@]}")
    else
      list=(); for ((i=${#SERVER_LIST[@]}-1; i>=0; i--)); do list+=("${SERVER_LIST[$i]}"); done
    fi
    for spec in "${list[@]}"; do run_one "$work" "$spec" "$round"; done
  done
done
echo "load after: $(uptime)" | tee -a "$OUT/load.txt" >&2
python3 perf/fanout_floor_table.py "$OUT" "${ORDER[@]}" | tee "$OUT/table.md"
