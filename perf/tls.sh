#!/usr/bin/env bash
# TLS (issue 11): the cost of amqps against plain AMQP, side by side on one broker.
# One release sluice (--shards 2, its own process) with a plain and a TLS listener and a
# throw-away PKI (openssl); sluice-bench drives, with sluice's full client for both so
# only the transport differs:
#
#   fanout-plain / fanout-tls    1 -> 16 subscribers, 64-byte no-ack, closed loop
#   fanout4k-plain / fanout4k-tls  the same with 4 KiB bodies (the copy into records)
#   idle-plain / idle-tls        1,000 idle connections (login + one channel): broker RSS
#
# The plain and TLS runs alternate (plain, TLS, plain, TLS, ...) REPEAT times each, so
# background load drifts into both alike. Reports deliveries/s, broker CPU µs per
# delivery and broker RSS from each run's JSON (sluice-bench reads /proc/PID/stat).
#
# Usage: perf/tls.sh [--duration S] [--repeat N] [--no-build]
# Environment: CARGO_TARGET_DIR (default ./target).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
DURATION=10
REPEAT=2
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ "$BUILD" = 1 ]; then
  cargo build --release -p sluice -p sluice-bench >&2
fi
BIN="$CARGO_TARGET_DIR/release"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="perf/results/$STAMP-tls"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
BROKER_PID=""
cleanup() {
  if [ -n "$BROKER_PID" ]; then kill -INT "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1 (EC P-256).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=sluice perf CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$WORK/server.key" -out "$WORK/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$WORK/san.ext"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
  -CAcreateserial -days 2 -extfile "$WORK/san.ext" -out "$WORK/server.pem" 2>/dev/null

PLAIN_PORT=5699
TLS_PORT=5698
"$BIN/sluice" --listen "127.0.0.1:$PLAIN_PORT" --tls-listen "127.0.0.1:$TLS_PORT" \
  --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key" --shards 2 \
  --data-dir "$WORK/data" --http-listen off > "$OUT/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 100); do grep -q "BRK-1004 : Ready" "$OUT/broker.log" && break; sleep 0.1; done
grep -q "BRK-1004 : Ready" "$OUT/broker.log" || { cat "$OUT/broker.log" >&2; exit 1; }
echo "load before: $(uptime)" | tee "$OUT/load.txt" >&2

PLAIN_URL="amqp://guest:guest@127.0.0.1:$PLAIN_PORT/"
TLS_URL="amqps://guest:guest@127.0.0.1:$TLS_PORT/"
COMMON=(--broker-pid "$BROKER_PID" --quiet --tls-ca "$WORK/ca.pem")

run() {
  local name="$1"; shift
  echo "== $name" >&2
  timeout 120 "$BIN/sluice-bench" "$@" "${COMMON[@]}" --json "$OUT/$name.json" \
    > "$OUT/$name.txt" 2>&1 || echo "$name failed: $(tail -3 "$OUT/$name.txt")" >&2
}

for i in $(seq "$REPEAT"); do
  for t in plain tls; do
    url=$PLAIN_URL; [ $t = tls ] && url=$TLS_URL
    run "fanout-$t-$i" fanout --url "$url" --subscribers 16 --size 64 --ack no-ack \
      --subscriber-client full --duration "$DURATION" --warmup 2
    run "fanout4k-$t-$i" fanout --url "$url" --subscribers 16 --size 4096 --ack no-ack \
      --subscriber-client full --duration "$DURATION" --warmup 2
  done
done
for t in plain tls; do
  url=$PLAIN_URL; [ $t = tls ] && url=$TLS_URL
  run "idle-$t" idle --url "$url" --connections 1000 --duration 5 --settle 3 \
    --setup-concurrency 64
done
echo "load after: $(uptime)" | tee -a "$OUT/load.txt" >&2
echo "results in $OUT" >&2
