#!/usr/bin/env bash
# Side-by-side runs of the standard scenarios: sluice (embedded, --shards 2) and,
# when the Debian package rabbitmq-server is installed, RabbitMQ started on loopback
# by this script and stopped after. Same client (sluice-bench), same flags,
# alternating per scenario. Writes perf/results/compare-<stamp>.md and the block
# between the compare markers in perf/RESULTS.md.
#
# Usage: perf/compare.sh [--duration S] [--warmup S] [--only NAME] [--no-rabbit]
# Install RabbitMQ first if wanted: apt-get update && apt-get install -y rabbitmq-server
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/.."
DURATION=10
WARMUP=2
ONLY=""
RABBIT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-rabbit) RABBIT=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin sluice -p sluice >&2
cargo build --release -p sluice-bench >&2
BENCH="$CARGO_TARGET_DIR/release/sluice-bench"
SLUICE="$CARGO_TARGET_DIR/release/sluice"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="perf/results/$STAMP"
mkdir -p "$OUT"

# name | sluice-bench arguments. Max-rate runs (no --rate) are closed loop: each
# publisher stays at most --max-ahead (10,000, or half a smaller
# x-slow-consumer-max-count) messages ahead of its fast subscribers, so they measure
# what the subscribers take, not how fast a backlog grows (--open-loop for that).
SCENARIOS=(
  "fanout-64B-noack|fanout --publishers 1 --subscribers 16 --size 64 --ack no-ack"
  "fanout-1KiB-noack|fanout --publishers 1 --subscribers 16 --size 1024 --ack no-ack"
  "fanout-64B-ack|fanout --publishers 1 --subscribers 16 --size 64 --ack client --prefetch 1000"
  "fanout-1KiB-ack|fanout --publishers 1 --subscribers 16 --size 1024 --ack client --prefetch 1000"
  "workq-4x4-1KiB-ack|workq --publishers 4 --consumers 4 --size 1024 --ack client --prefetch 1000"
  "slowsub-16-K1-R100|slowsub --publishers 1 --subscribers 16 --slow 1 --slow-rate 100 --size 64"
  "slowsub-16-K1-R100-delete|slowsub --publishers 1 --subscribers 16 --slow 1 --slow-rate 100 --size 64 --policy delete --max-count 10000"
  "slowsub-16-K1-R100-cycle|slowsub --publishers 1 --subscribers 16 --slow 1 --slow-rate 100 --size 64 --policy cycle --max-count 10000"
  "latency-fanout-64B-1000/s|fanout --publishers 1 --subscribers 16 --size 64 --ack no-ack --rate 1000"
  "persistent-1KiB-confirm|persistent --size 1024 --confirm 100"
)

# shellcheck source=perf/rabbit.sh
. "$HERE/rabbit.sh"
trap rabbit_stop EXIT

HAVE_RABBIT=0
if rabbit_available; then rabbit_start && HAVE_RABBIT=1; fi

for entry in "${SCENARIOS[@]}"; do
  name="${entry%%|*}"; args="${entry#*|}"
  if [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]]; then continue; fi
  safe="${name//\//-}"
  echo "== $name: sluice" >&2
  # shellcheck disable=SC2086
  "$BENCH" $args --duration "$DURATION" --warmup "$WARMUP" --drain-timeout 30 --shards 2 --embedded process \
    --broker-bin "$SLUICE" --quiet --json "$OUT/$safe.sluice.json" >&2 || echo "sluice run failed: $name" >&2
  if [ "$HAVE_RABBIT" = 1 ]; then
    echo "== $name: rabbitmq" >&2
    # shellcheck disable=SC2086
    "$BENCH" $args --duration "$DURATION" --warmup "$WARMUP" --drain-timeout 30 --quiet \
      --url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" --broker-pid "$RABBIT_PID" \
      --json "$OUT/$safe.rabbitmq.json" >&2 || echo "rabbitmq run failed: $name" >&2
  fi
done

REV="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo -dirty)"
LOAD="$(cut -d" " -f1-3 /proc/loadavg)"
python3 - "$OUT" "$HAVE_RABBIT" "${RABBIT_VERSION:-}" "$REV" "$LOAD" > "$OUT/table.md" <<'PY'
import json, os, sys, glob
out, have_rabbit, rv, rev, load = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
def rate(r): return f"{r/1e6:.2f}M" if r >= 1e6 else (f"{r/1e3:.1f}k" if r >= 1e3 else f"{r:.0f}")
def ns(v): return f"{v/1e6:.2f} ms" if v >= 1e6 else (f"{v/1e3:.0f} µs" if v >= 1e3 else f"{v} ns")
rows = []
first = None
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    base = os.path.basename(f)[:-5]
    name, broker = base.rsplit(".", 1)
    j = json.load(open(f))
    first = first or j
    cpu = j.get("broker_cpu_ns_per_delivered")
    rows.append((name, broker, j))
print(f"Run {first['date_utc'] if first else '?'} at sluice {rev} on a {first['machine_cores'] if first else '?'}-core machine (load average at the end: {load})"
      f"{'; RabbitMQ ' + rv if have_rabbit else '; RabbitMQ not installed (apt-get install -y rabbitmq-server), sluice only'}.\n")
def pacing(j):
    p = j.get("pacing", "open loop")
    if not p.startswith("closed loop"):
        return "open" if j.get("config", {}).get("rate", 0) == 0 else "fixed rate"
    ran = sum(x.get("run_ms", 0) for x in j.get("publishers", [])) or 1
    return f"closed {j.get('pacing_max_ahead')}, {100 * j.get('pacing_wait_ms', 0) / ran:.0f} % waiting"
print("| scenario | broker | published/s | delivered/s | p50 | p99 | broker CPU ns/delivered | broker RSS max | tool CPU ns/msg | delivered/expected | pacing | channels closed |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
by = {}
for name, broker, j in rows:
    l = j["latency"]; cpu = j.get("broker_cpu_ns_per_delivered")
    by.setdefault(name, {})[broker] = j
    print(f"| {name} | {broker} | {rate(j['publish_rate'])} | {rate(j['deliver_rate'])} | {ns(l['p50_ns'])} | {ns(l['p99_ns'])} | "
          f"{'n/a' if cpu is None else f'{cpu:.0f}'} | {j['broker_rss_max_bytes']/2**20:.0f} MiB | {j['tool_cpu_ns_per_message']:.0f} | {j['delivered']}/{j['expected_delivered']} | "
          f"{pacing(j)} | {len(j.get('channel_closes', []))} |")
if have_rabbit:
    print("\n| scenario | delivered/s ratio sluice/RabbitMQ | broker CPU per delivery ratio RabbitMQ/sluice | p99 ratio RabbitMQ/sluice |")
    print("|---|---:|---:|---:|")
    for name, b in by.items():
        s, r = b.get("sluice"), b.get("rabbitmq")
        if not s or not r: continue
        dr = s["deliver_rate"] / max(r["deliver_rate"], 1e-9)
        sc, rc = s.get("broker_cpu_ns_per_delivered"), r.get("broker_cpu_ns_per_delivered")
        cr = f"{rc/sc:.1f}x" if sc and rc else "n/a"
        lr = f"{r['latency']['p99_ns']/max(s['latency']['p99_ns'],1):.1f}x"
        print(f"| {name} | {dr:.1f}x | {cr} | {lr} |")
notes = sorted({n for _, _, j in rows for n in j.get("notes", [])})
for n in notes: print(f"\nNote: {n}")
PY

cat "$OUT/table.md"
python3 - "$OUT/table.md" <<'PY'
import sys, re
table = open(sys.argv[1]).read()
path = "perf/RESULTS.md"
try: text = open(path).read()
except FileNotFoundError: text = "# sluice performance results\n\n<!-- compare:begin -->\n<!-- compare:end -->\n"
block = "<!-- compare:begin -->\n## Latest perf/compare.sh run\n\n" + table + "\n<!-- compare:end -->"
if "<!-- compare:begin -->" in text:
    text = re.sub(r"<!-- compare:begin -->.*?<!-- compare:end -->", lambda m: block, text, flags=re.S)
else:
    text += "\n" + block + "\n"
open(path, "w").write(text)
PY
echo "wrote $OUT/table.md and perf/RESULTS.md" >&2
