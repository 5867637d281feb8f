#!/usr/bin/env bash
# Issue 8's store measurement: one durable queue, persistent 1 KiB messages, publisher
# confirms with 1,000 in flight, one consumer with manual ack (prefetch 1,000, one
# `multiple` ack per received batch), closed loop — against
#
#   sluice          target/release/sluice --shards 2 --data-dir <fresh dir> (fsync on)
#   sluice-nofsync  the same with `[store] fsync = false` (--config): what fsync costs;
#                   skipped, with the broker's reason, by a sluice that refuses the key
#   rabbitmq        RabbitMQ 3.10 (perf/rabbit.sh; durable queue, same client, same flags)
#
# Each sluice is started here (its log to a file), driven by sluice-bench with
# --broker-pid (CPU, RSS) and --broker-log ... --stop-broker: after the run the tool
# SIGTERMs it and sums the `MST-1003 : Closed : ... <fsyncs> fsyncs ...` lines its
# shards log at shutdown, divided by the run's length (first publish to end of drain).
# RabbitMQ's fsyncs are not counted (n/a).
#
# Per broker: confirmed msgs/s, confirm latency p50 / p99 (publish -> basic.ack, every
# message timed on its own), delivered/s and delivery p99, fsyncs/s and confirmed
# messages per fsync, broker CPU us per confirmed message, broker RSS, the data dir's
# size after the stop. Target (sluice): >= 100,000 confirmed msgs/s, p99 < 5 ms.
#
# Usage: perf/store.sh [--duration S] [--warmup S] [--only NAME] [--no-rabbit]
#                      [--no-build]
# Environment: CARGO_TARGET_DIR (default ./target), PORT (sluice, default 5697).
# Writes perf/results/<stamp>-store/: NAME.json (every figure), NAME.txt (live lines and
# summary), NAME.log (sluice's log), table.md; prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
DURATION=20
WARMUP=3
ONLY=""
BUILD=1
RABBIT_WANTED=1
PORT="${PORT:-5697}"
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-rabbit) RABBIT_WANTED=0; shift ;;
    --no-build) BUILD=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ "$BUILD" = 1 ]; then
  echo "building (release) ..." >&2
  cargo build --release --bin sluice -p sluice >&2
  cargo build --release -p sluice-bench >&2
fi
SLUICE="$CARGO_TARGET_DIR/release/sluice"
BENCH="$CARGO_TARGET_DIR/release/sluice-bench"
[ -x "$SLUICE" ] && [ -x "$BENCH" ] || { echo "no sluice / sluice-bench in $CARGO_TARGET_DIR/release" >&2; exit 2; }
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="$REPO/perf/results/$STAMP-store"
mkdir -p "$OUT"
# Scratch: data dirs, the fsync=false config, and the cwd of RabbitMQ (erl_crash.dump).
WORK="$(mktemp -d /tmp/sluice-store-bench.XXXXXX)"
RUN_LIMIT=$(awk "BEGIN { print int($DURATION + $WARMUP + 90) }")
COMMON=(persistent --publishers 1 --consumers 1 --size 1024 --confirm 1000 --ack client
        --prefetch 1000 --duration "$DURATION" --warmup "$WARMUP" --drain-timeout 10
        --settle 0)
SLUICE_PID=""
cleanup() {
  if [ -n "$SLUICE_PID" ] && kill -0 "$SLUICE_PID" 2>/dev/null; then
    kill -TERM "$SLUICE_PID" 2>/dev/null || true
    wait "$SLUICE_PID" 2>/dev/null || true
  fi
  if declare -F rabbit_stop >/dev/null; then rabbit_stop; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
{
  echo "git: $(git rev-parse --short HEAD)$(git diff --quiet -- src bench || echo -dirty)"
  echo "cores: $(nproc)"
  echo "load before: $(uptime)"
  echo "sluice-bench ${COMMON[*]}"
} | tee "$OUT/env.txt" >&2
wanted() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

# run_sluice NAME [sluice flags...]
run_sluice() {
  local name="$1"; shift
  wanted "$name" || return 0
  local data="$WORK/$name-data" log="$OUT/$name.log"
  echo "== $name: sluice --shards 2 --data-dir $data $* (log $log)" >&2
  "$SLUICE" --shards 2 --data-dir "$data" --listen "127.0.0.1:$PORT" "$@" > "$log" 2>&1 &
  SLUICE_PID=$!
  local ready=0
  for _ in $(seq 1 200); do
    if grep -q BRK-1004 "$log"; then ready=1; break; fi
    kill -0 "$SLUICE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$ready" = 0 ]; then
    local why
    why="$(grep -Ev '^\s*$|^\s*([0-9]+\s*)?\|' "$log" | tail -3 | tr '\n' ' ' || true)"
    echo "   $name skipped: sluice did not start: $why" >&2
    echo "sluice did not start: $why" > "$OUT/$name.skipped"
    kill -TERM "$SLUICE_PID" 2>/dev/null || true
    wait "$SLUICE_PID" 2>/dev/null || true
    SLUICE_PID=""
    return 0
  fi
  echo "   pid $SLUICE_PID; ${WARMUP} s warm-up + ${DURATION} s measured ..." >&2
  local t0=$SECONDS
  if ! timeout -s INT -k 15 "$RUN_LIMIT" "$BENCH" "${COMMON[@]}" \
      --url "amqp://guest:guest@127.0.0.1:$PORT/" --broker-pid "$SLUICE_PID" \
      --broker-log "$log" --stop-broker --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.txt" >&2; then
    echo "   $name: sluice-bench failed or was cut at ${RUN_LIMIT} s (see $OUT/$name.txt)" >&2
  fi
  # sluice-bench stopped it (--stop-broker); make sure it is gone.
  for _ in $(seq 1 300); do kill -0 "$SLUICE_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SLUICE_PID" 2>/dev/null; then
    echo "   $name: still running 30 s after the run; SIGTERM" >&2
    kill -TERM "$SLUICE_PID" 2>/dev/null || true
  fi
  wait "$SLUICE_PID" 2>/dev/null || true
  SLUICE_PID=""
  local size="n/a"
  [ -d "$data" ] && size="$(du -sb "$data" | cut -f1)"
  echo "$size" > "$OUT/$name.datadir-bytes"
  echo "   $((SECONDS - t0)) s; store lines of its log:" >&2
  grep -E 'MST-10' "$log" | sed 's/^/     /' >&2 || echo "     (none: a sluice without the store)" >&2
  rm -rf "$data"
}

run_sluice sluice
printf '[store]\nfsync = false\n' > "$WORK/nofsync.toml"
run_sluice sluice-nofsync --config "$WORK/nofsync.toml"

. "$REPO/perf/rabbit.sh"
if [ "$RABBIT_WANTED" = 1 ] && rabbit_available && wanted rabbitmq; then
  echo "== rabbitmq: starting a throw-away node (cwd $WORK) ..." >&2
  cd "$WORK"
  if rabbit_start; then
    echo "   ${WARMUP} s warm-up + ${DURATION} s measured ..." >&2
    if ! timeout -s INT -k 15 "$RUN_LIMIT" "$BENCH" "${COMMON[@]}" \
        --url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" --broker-pid "$RABBIT_PID" \
        --json "$OUT/rabbitmq.json" 2>&1 | tee "$OUT/rabbitmq.txt" >&2; then
      echo "   rabbitmq: sluice-bench failed or was cut (see $OUT/rabbitmq.txt)" >&2
    fi
    echo "RabbitMQ $RABBIT_VERSION" >> "$OUT/env.txt"
    rabbit_stop
  fi
  cd "$REPO"
elif [ "$RABBIT_WANTED" = 1 ] && wanted rabbitmq; then
  echo "RabbitMQ not installed (apt-get install -y rabbitmq-server): no side-by-side run" >&2
fi

echo "load after: $(uptime)" | tee -a "$OUT/env.txt" >&2
python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, os, sys
out = sys.argv[1]
def ns(v):
    if v is None: return "n/a"
    if v >= 1e9: return f"{v/1e9:.2f} s"
    if v >= 1e6: return f"{v/1e6:.2f} ms"
    if v >= 1e3: return f"{v/1e3:.0f} µs"
    return f"{v:.0f} ns"
def rate(r):
    if r is None: return "n/a"
    if r >= 1e6: return f"{r/1e6:.2f} M"
    if r >= 1e3: return f"{r/1e3:.1f} k"
    return f"{r:.0f}"
def size(b):
    if b is None: return "n/a"
    return f"{b/2**20:.0f} MiB" if b >= 2**20 else f"{b/1024:.0f} KiB"
env = open(os.path.join(out, "env.txt")).read().strip().splitlines()
print("Store benchmark (issue 8): 1 publisher, 1 durable queue, persistent 1 KiB, confirms "
      "1,000 in flight, 1 consumer, manual ack (prefetch 1,000). " + "; ".join(env))
print()
print("| broker | confirmed msgs/s | confirm p50 | confirm p99 | delivered/s | deliver p99 "
      "| fsyncs/s | confirmed msgs per fsync | broker CPU per msg | broker cores | broker RSS max "
      "| data dir after stop | target ≥100k/s, p99 <5 ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for name in ["sluice", "sluice-nofsync", "rabbitmq"]:
    skipped = os.path.join(out, name + ".skipped")
    path = os.path.join(out, name + ".json")
    if os.path.exists(skipped):
        print(f"| {name} | skipped (below) |" + " |" * 11)
        continue
    if not os.path.exists(path):
        continue
    j = json.load(open(path))
    cl = j.get("confirm_latency") or {}
    st = j.get("store")
    fs = f"{st['fsyncs_per_s']:.0f}" if st else "n/a"
    per = f"{st['confirmed_per_fsync']:.1f}" if st and st.get("confirmed_per_fsync") else "n/a"
    cpu = j.get("broker_cpu_ns_per_confirmed")
    cpu = "n/a" if cpu is None else f"{cpu/1e3:.2f} µs"
    cores = j.get("broker_cpu_cores")
    cores = "n/a" if cores is None else f"{cores:.2f}"
    dd = os.path.join(out, name + ".datadir-bytes")
    dd = open(dd).read().strip() if os.path.exists(dd) else "n/a"
    dd = size(int(dd)) if dd.isdigit() else dd
    target = "-"
    if name.startswith("sluice"):
        ok = j["confirm_rate"] >= 100_000 and cl.get("p99_ns", 1e18) < 5_000_000
        target = ("met" if ok else "not met") + ("" if st else " (no store: confirms from memory)")
    print(f"| {name} | {rate(j['confirm_rate'])} | {ns(cl.get('p50_ns'))} | {ns(cl.get('p99_ns'))} "
          f"| {rate(j['deliver_rate'])} | {ns(j['latency']['p99_ns'])} | {fs} | {per} | {cpu} | {cores} "
          f"| {size(j['broker_rss_max_bytes'])} | {dd} | {target} |")
print()
for name in ["sluice", "sluice-nofsync", "rabbitmq"]:
    skipped = os.path.join(out, name + ".skipped")
    if os.path.exists(skipped):
        print(f"{name} skipped: {open(skipped).read().strip()}")
    path = os.path.join(out, name + ".json")
    if os.path.exists(path):
        j = json.load(open(path))
        why = j.get("store_unavailable")
        if why and name.startswith("sluice"):
            print(f"{name}: fsyncs n/a: {why}")
        errs = [p["error"] for p in j.get("publishers", []) if p.get("error")]
        if errs:
            print(f"{name}: publisher error: {errs[0]}")
print(f"\nJSON, summaries and logs: {out}/")
PY
