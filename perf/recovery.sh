#!/usr/bin/env bash
# Issue 8's recovery measurement: fill a fresh store with N persistent messages on one
# durable queue, stop sluice (SIGTERM), restart it on the same data dir and report
#
#   recovery time      from `MST-1006 : Recovery Complete : <n> messages in <q> queues,
#                      <ms> ms` (the broker's own figure), and the messages it found
#   wall time to ready from the restart's exec to `BRK-1004 : Ready` in its log
#   RSS after recovery of the restarted broker, at ready and 2 s later
#   data dir size      after the fill's shutdown (du -sb), and its segment files
#
# The fill: sluice-bench persistent --consumers 0 --max-messages N --confirm 1000
# --keep-queue (1 publisher, persistent messages, 1,000 confirms in flight, no
# consumer; the run ends once all N are confirmed). A sluice without the store (no
# MST-1006 line) is reported as such: its restart finds nothing.
#
# Usage: perf/recovery.sh [--messages N] [--size BYTES] [--shards N] [--no-build]
#   --messages N   default 1,000,000 (1 KiB each: about 1.1 GB of segments); try
#                  --messages 10000 first
# Environment: CARGO_TARGET_DIR (default ./target), PORT (default 5696), DATA_ROOT
# (where the data dir goes, default /tmp), RECOVERY_LIMIT (s to wait for the restart's
# BRK-1004, default 900).
# Writes perf/results/<stamp>-recovery/: fill.json, fill.txt, fill.log, restart.log,
# summary.md; prints the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
MESSAGES=1000000
SIZE=1024
SHARDS=2
BUILD=1
PORT="${PORT:-5696}"
RECOVERY_LIMIT="${RECOVERY_LIMIT:-900}"
while [ $# -gt 0 ]; do
  case "$1" in
    --messages) MESSAGES="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
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
OUT="$REPO/perf/results/$STAMP-recovery"
mkdir -p "$OUT"
WORK="$(mktemp -d "${DATA_ROOT:-/tmp}/sluice-recovery.XXXXXX")"
DATA="$WORK/data"
PID=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
now_ns() { date +%s%N; }
ms_since() { echo $(( ($(now_ns) - $1) / 1000000 )); }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# wait_ready LOG LIMIT_S: 0 once BRK-1004 is in LOG, 1 if the broker died or the limit passed.
wait_ready() {
  local log="$1" limit="$2" t0
  t0=$(now_ns)
  while ! grep -q BRK-1004 "$log"; do
    kill -0 "$PID" 2>/dev/null || return 1
    [ "$(ms_since "$t0")" -lt $((limit * 1000)) ] || return 1
    sleep 0.01
  done
}
# stop_broker: SIGTERM, wait until it has exited (in this shell: it is our child);
# sets STOP_MS to the time that took.
stop_broker() {
  local t0
  t0=$(now_ns)
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  STOP_MS=$(ms_since "$t0")
  PID=""
}
{
  echo "git: $(git rev-parse --short HEAD)$(git diff --quiet -- src bench || echo -dirty)"
  echo "cores: $(nproc)"
  echo "load before: $(uptime)"
} | tee "$OUT/env.txt" >&2

echo "== fill: sluice --shards $SHARDS --data-dir $DATA; $MESSAGES persistent messages of $SIZE B, confirms 1,000 in flight, no consumer" >&2
"$SLUICE" --shards "$SHARDS" --data-dir "$DATA" --listen "127.0.0.1:$PORT" > "$OUT/fill.log" 2>&1 &
PID=$!
wait_ready "$OUT/fill.log" 30 || { echo "sluice did not start:" >&2; tail -5 "$OUT/fill.log" >&2; exit 1; }
FILL_PID=$PID
T_FILL=$(now_ns)
# Its live line (one a second) is the progress.
if ! "$BENCH" persistent --url "amqp://guest:guest@127.0.0.1:$PORT/" --broker-pid "$PID" \
    --publishers 1 --consumers 0 \
    --size "$SIZE" --confirm 1000 --max-messages "$MESSAGES" --warmup 0 --duration 86400 \
    --keep-queue --settle 0 --json "$OUT/fill.json" 2>&1 | tee "$OUT/fill.txt" >&2; then
  echo "the fill failed (see $OUT/fill.txt)" >&2
  exit 1
fi
FILL_MS=$(ms_since "$T_FILL")
stop_broker
STOP1_MS=$STOP_MS
read -r CONFIRMED PUBLISHED < <(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(j["confirmed"], j["published"])' "$OUT/fill.json")
if [ -d "$DATA" ]; then
  DATA_BYTES=$(du -sb "$DATA" | cut -f1)
  SEGMENTS=$(find "$DATA" -name '*.seg' | wc -l)
else
  DATA_BYTES="n/a"; SEGMENTS=0
fi
echo "   filled: $CONFIRMED of $PUBLISHED confirmed in $((FILL_MS / 1000)) s; data dir $DATA_BYTES bytes, $SEGMENTS segment files" >&2

echo "== restart on the same data dir ..." >&2
T0=$(now_ns)
"$SLUICE" --shards "$SHARDS" --data-dir "$DATA" --listen "127.0.0.1:$PORT" > "$OUT/restart.log" 2>&1 &
PID=$!
RESTART_PID=$PID
if ! wait_ready "$OUT/restart.log" "$RECOVERY_LIMIT"; then
  echo "the restarted sluice did not report BRK-1004 within $RECOVERY_LIMIT s:" >&2
  tail -5 "$OUT/restart.log" >&2
  exit 1
fi
READY_MS=$(ms_since "$T0")
RSS_READY=$(rss_kib "$PID")
sleep 2
RSS_SETTLED=$(rss_kib "$PID")
stop_broker
STOP2_MS=$STOP_MS

python3 - "$OUT" "$MESSAGES" "$SIZE" "$SHARDS" "$CONFIRMED" "$FILL_MS" "$STOP1_MS" \
    "$DATA_BYTES" "$SEGMENTS" "$READY_MS" "$RSS_READY" "$RSS_SETTLED" "$STOP2_MS" \
    "$FILL_PID" "$RESTART_PID" <<'PY' | tee "$OUT/summary.md"
import json, os, re, sys
(out, messages, size, shards, confirmed, fill_ms, stop1_ms, data_bytes, segments, ready_ms,
 rss_ready, rss_settled, stop2_ms, fill_pid, restart_pid) = sys.argv[1:]
def num(s):
    return int(s.replace(",", ""))
restart = open(os.path.join(out, "restart.log")).read()
done = re.findall(r"MST-1006 : Recovery Complete : ([\d,]+) messages in ([\d,]+) queues, ([\d,]+) ms", restart)
per_queue = re.findall(r"MST-1005 : Recovered ([\d,]+) messages", restart)
truncated = [l for l in restart.splitlines() if "MST-1010" in l]
j = json.load(open(os.path.join(out, "fill.json")))
closed = re.findall(r"MST-1003 : Closed : ([\d,]+) commits, ([\d,]+) fsyncs, ([\d,]+) bytes written",
                    open(os.path.join(out, "fill.log")).read())
cl = j.get("confirm_latency") or {}
env = open(os.path.join(out, "env.txt")).read().strip().splitlines()
def mib(kib_or_bytes, unit=1):
    try:
        return f"{int(kib_or_bytes) * unit / 2**20:.0f} MiB"
    except ValueError:
        return kib_or_bytes
print(f"Recovery benchmark (issue 8): {num(messages):,} persistent {size} B messages on one durable "
      f"queue, sluice --shards {shards}. " + "; ".join(env))
print()
print("| figure | value |")
print("|---|---|")
print(f"| fill: confirmed / asked | {num(confirmed):,} / {num(messages):,} in {int(fill_ms)/1000:.1f} s "
      f"({num(confirmed) / max(int(fill_ms), 1) * 1000:,.0f} msgs/s; confirm p99 "
      f"{cl.get('p99_ns', 0)/1e6:.2f} ms) |")
if closed:
    c, f, b = (sum(num(x[i]) for x in closed) for i in range(3))
    print(f"| fill: store counters (MST-1003, {len(closed)} shards) | {f:,} fsyncs, {c:,} commits, "
          f"{b:,} bytes written |")
else:
    print("| fill: store counters (MST-1003) | n/a (no MST-1003 line in fill.log) |")
print(f"| shutdown after the fill (SIGTERM → exit) | {int(stop1_ms)} ms |")
if data_bytes.isdigit():
    print(f"| data dir after the fill | {mib(data_bytes)} ({int(data_bytes):,} bytes), {segments} segment files |")
else:
    print("| data dir after the fill | n/a: the broker made no data dir (no store) |")
if done:
    n, q, ms = (num(x) for x in done[-1])
    verdict = "all there" if n == num(confirmed) else f"{num(confirmed) - n:+,} missing"
    print(f"| recovery (MST-1006) | **{ms:,} ms**: {n:,} messages in {q} queues ({verdict}) |")
else:
    print("| recovery (MST-1006) | n/a: no MST-1006 line (a sluice without the persistent store; "
          "its restart finds nothing) |")
if per_queue:
    print(f"| MST-1005 lines | {len(per_queue)} ({sum(num(x) for x in per_queue):,} messages) |")
if truncated:
    print(f"| MST-1010 (torn tail cut) | {len(truncated)}: {truncated[0].strip()} |")
print(f"| wall time exec → BRK-1004 Ready | **{int(ready_ms):,} ms** |")
print(f"| RSS after recovery | {mib(rss_ready, 1024)} at ready, {mib(rss_settled, 1024)} 2 s later |")
print(f"| shutdown after recovery | {int(stop2_ms)} ms |")
print(f"\nLogs and JSON: {out}/ (fill pid {fill_pid}, restart pid {restart_pid})")
PY
