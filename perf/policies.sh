#!/usr/bin/env bash
# The overload-policy measurements of issues 6 and 7, one after the other, sluice
# (embedded child process, --shards 2) and, where a RabbitMQ counterpart exists and the
# Debian package rabbitmq-server is installed, RabbitMQ in the same run:
#
#   slowsub   16 subscribers on one topic, 64 B at the publisher's maximum rate (closed
#             loop), one subscriber limited to 100 msg/s: policy delete, policy cycle,
#             and the same 15 fast subscribers without the slow one; RabbitMQ with
#             x-max-length 10000 + drop-head, and without the slow one.
#   heavy     the same with 1,000 subscribers, 10 of them slow (delete, cycle, none).
#   capacity  4 publishers at their maximum rate into a queue with capacity 10 MiB and
#             resume capacity 8 MiB, one consumer at 10% of that rate; then the same
#             with publishers that ignore the flow signal.
#   flood     open-loop 1->16 fan-out at the publisher's maximum rate, 64 B, no-ack, the
#             16 subscribers each taking at most 20,000 msg/s (so the publisher outruns
#             them and every queue grows): with a 256 MiB memory watermark (60 s) and with
#             the default one (20 s).
#
# Writes perf/results/<stamp>-policies/*.json and *.txt and prints a summary table.
# Usage: perf/policies.sh [--duration S] [--only NAME] [--no-rabbit]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/.."
DURATION=60
ONLY=""
RABBIT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-rabbit) RABBIT=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --workspace >&2
BENCH="$CARGO_TARGET_DIR/release/sluice-bench"
SLUICE="$CARGO_TARGET_DIR/release/sluice"
OUT="perf/results/$(date -u +%Y%m%dT%H%M%SZ)-policies"
mkdir -p "$OUT"
# shellcheck source=perf/rabbit.sh
. "$HERE/rabbit.sh"
trap rabbit_stop EXIT

SLOW="--publishers 1 --size 64 --slow-rate 100 --warmup 2"
# name | broker (sluice or rabbitmq) | sluice-bench arguments
RUNS=(
  "slowsub-delete|sluice|slowsub $SLOW --subscribers 16 --slow 1 --policy delete --max-count 10000"
  "slowsub-cycle|sluice|slowsub $SLOW --subscribers 16 --slow 1 --policy cycle --max-count 10000"
  "slowsub-none|sluice|slowsub $SLOW --subscribers 15 --slow 0"
  "slowsub-maxlen|rabbitmq|slowsub $SLOW --subscribers 16 --slow 1 --rabbit-max-length 10000"
  "slowsub-none|rabbitmq|slowsub $SLOW --subscribers 15 --slow 0"
  "heavy-delete|sluice|slowsub $SLOW --subscribers 1000 --slow 10 --policy delete --max-count 10000"
  "heavy-cycle|sluice|slowsub $SLOW --subscribers 1000 --slow 10 --policy cycle --max-count 10000"
  "heavy-none|sluice|slowsub $SLOW --subscribers 990 --slow 0"
  "capacity|sluice|flow --warmup 2"
  "capacity-ignoring|sluice|flow --warmup 2 --ignore-flow"
  "flood-watermark|sluice|fanout --publishers 1 --subscribers 16 --slow 16 --slow-rate 20000 --size 64 --ack no-ack --open-loop --warmup 2 --broker-arg=--memory-high-watermark=268435456"
)

HAVE_RABBIT=0
if rabbit_available; then rabbit_start && HAVE_RABBIT=1; fi

run() { # name broker duration args...
  local name="$1" broker="$2" duration="$3"; shift 3
  local file="$OUT/$name.$broker"
  echo "== $name ($broker)" >&2
  if [ "$broker" = sluice ]; then
    "$BENCH" "$@" --duration "$duration" --shards 2 --embedded process --broker-bin "$SLUICE" \
      --json "$file.json" > "$file.txt" 2>&1 || echo "run failed: $name $broker" >&2
  elif [ "$HAVE_RABBIT" = 1 ]; then
    "$BENCH" "$@" --duration "$duration" --url "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/" \
      --broker-pid "$RABBIT_PID" --json "$file.json" > "$file.txt" 2>&1 || echo "run failed: $name $broker" >&2
  fi
}

CAL=""
for entry in "${RUNS[@]}"; do
  IFS='|' read -r name broker args <<< "$entry"
  if [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]]; then continue; fi
  # shellcheck disable=SC2086
  set -- $args
  if [ "$name" = capacity-ignoring ] && [ -n "$CAL" ]; then
    # The same consumer rate as the honouring run, so the two are comparable.
    set -- "$@" --slow-rate "$CAL"
  fi
  run "$name" "$broker" "$DURATION" "$@"
  if [ "$name" = capacity ] && [ -f "$OUT/capacity.sluice.json" ]; then
    CAL="$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(int((j.get("calibration") or {}).get("slow_rate") or 0) or "")' "$OUT/capacity.sluice.json")"
  fi
done
if [ -z "$ONLY" ] || [[ flood-default == *"$ONLY"* ]]; then
  run flood-default sluice 20 fanout --publishers 1 --subscribers 16 --slow 16 --slow-rate 20000 --size 64 --ack no-ack --open-loop --warmup 2
fi

REV="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo -dirty)"
python3 "$HERE/policies_table.py" "$OUT" "$REV" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/table.md"
