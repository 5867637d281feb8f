#!/usr/bin/env bash
# Where a subscriber's heap goes (issue 23): heaptrack of a broker built with the C
# allocator (`--features system-alloc`; heaptrack does not see mimalloc's allocations)
# while sluice-bench's 1 -> $SUBS fanout runs against it, killed mid-run so that the
# subscribers' memory is live. Prints the peak heap, its share per subscriber, and the
# peak by the deepest sluice function on each allocation's stack (allocator and
# collection plumbing skipped), per subscriber.
#
# Usage: perf/heap_fanout.sh
# Environment: SUBS (2000), RATE (10 msg/s), SHARDS (2), PORT (5696), RUN (10 s before
#   the kill), OUT (directory for the heaptrack file, default /tmp/sluice-heap).
set -euo pipefail
cd "$(dirname "$0")/.."
SUBS="${SUBS:-2000}"
RATE="${RATE:-10}"
SHARDS="${SHARDS:-2}"
PORT="${PORT:-5696}"
RUN="${RUN:-10}"
OUT="${OUT:-/tmp/sluice-heap}"
command -v heaptrack > /dev/null || { echo "heaptrack is not installed (apt-get install heaptrack)" >&2; exit 2; }
TARGET=target/system-alloc
cargo build --release -p sluice --bin sluice --features system-alloc --target-dir "$TARGET" >&2
[ -x target/release/sluice-bench ] || cargo build --release -p sluice-bench >&2
BIN="$TARGET/release/sluice"
mkdir -p "$OUT"
rm -f "$OUT"/heap.zst*
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
DATA="$(mktemp -d /tmp/sluice-heap-data.XXXXXX)"
heaptrack -o "$OUT/heap" "$BIN" --listen "127.0.0.1:$PORT" --shards "$SHARDS" \
  --http-listen off --data-dir "$DATA" > "$OUT/broker.log" 2>&1 &
TRACK=$!
LOAD=""
cleanup() {
  [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null || true
  # The broker is heaptrack's child: killing the wrapper alone would leave it running.
  pkill -P "$TRACK" 2>/dev/null || true
  kill "$TRACK" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT
for _ in $(seq 1 600); do grep -q BRK-1004 "$OUT/broker.log" 2>/dev/null && break; sleep 0.1; done
target/release/sluice-bench fanout --url "amqp://guest:guest@127.0.0.1:$PORT/" \
  --subscribers "$SUBS" --rate "$RATE" --size 64 --ack no-ack --subscriber-client wire \
  --duration $((RUN + 10)) --warmup 1 --quiet > "$OUT/load.txt" 2>&1 &
LOAD=$!
sleep "$RUN"
# The broker itself (heaptrack's wrapper is its parent): killed, so that nothing is freed.
BROKER="$(pgrep -P "$TRACK" -f "^$BIN")"
kill -9 "$BROKER"
sleep 1
kill "$LOAD" 2>/dev/null || true
wait 2>/dev/null || true
LOAD=""
heaptrack_print -f "$OUT"/heap.zst* --print-flamegraph "$OUT/peak.folded" \
  --flamegraph-cost-type peak | grep "peak heap"
python3 - "$OUT/peak.folded" "$SUBS" <<'PY'
import collections, re, sys
path, subs = sys.argv[1], int(sys.argv[2])
plumbing = re.compile(r"alloc|raw_vec|Vec<|Box<|smallvec|hashbrown|clone|to_vec|to_owned|collect|extend|String")
by_site, total = collections.Counter(), 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    if not n.isdigit():
        continue
    total += int(n)
    frames = stack.split(";")
    site = next((f for f in reversed(frames) if "sluice" in f and not plumbing.search(f)), frames[-1])
    site = re.sub(r"::h[0-9a-f]{16}", "", site)
    for mangled, plain in (("_$LT$", "<"), ("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "),
                           ("$u7b$", "{"), ("$u7d$", "}"), ("..", "::")):
        site = site.replace(mangled, plain)
    by_site[site[:150]] += int(n)
print(f"per subscriber: {total / subs:,.0f} bytes of peak heap ({subs} subscribers)")
for site, n in by_site.most_common(20):
    print(f"{n / subs:8,.0f} B  {site}")
PY
