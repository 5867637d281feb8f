# Starting and stopping a throw-away RabbitMQ node on loopback for side-by-side runs
# (sourced by compare.sh and policies.sh). Needs the Debian package rabbitmq-server:
#   apt-get update && apt-get install -y rabbitmq-server
# Sets RABBIT_PID, RABBIT_VERSION and RABBIT_PORT; set RABBIT=0 to skip RabbitMQ.
RABBIT="${RABBIT:-1}"
RABBIT_PORT=5679
RABBIT_NODE="sluicebench@localhost"
RABBIT_DIR=""
# The Debian wrappers in /usr/sbin switch to the rabbitmq user and drop the
# environment; run the real scripts (as the invoking user) so the loopback-only,
# temporary-directory settings below apply.
RMQ_BIN=/usr/lib/rabbitmq/bin
rabbit_available() { [ "$RABBIT" = 1 ] && [ -x "$RMQ_BIN/rabbitmq-server" ]; }

rabbit_start() {
  RABBIT_DIR="$(mktemp -d /tmp/sluice-rabbit.XXXXXX)"
  export RABBITMQ_NODENAME="$RABBIT_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$RABBIT_PORT RABBITMQ_MNESIA_BASE="$RABBIT_DIR/mnesia" \
    RABBITMQ_LOG_BASE="$RABBIT_DIR/log" RABBITMQ_DIST_PORT=25679 \
    RABBITMQ_ENABLED_PLUGINS_FILE="$RABBIT_DIR/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$RABBIT_DIR/rabbitmq"
  echo "[]." > "$RABBIT_DIR/enabled_plugins"
  # Loopback only, and no disk alarm on small test disks.
  printf 'listeners.tcp.default = 127.0.0.1:%s\ndisk_free_limit.absolute = 50MB\n' $RABBIT_PORT > "$RABBIT_DIR/rabbitmq.conf"
  "$RMQ_BIN/rabbitmq-server" > "$RABBIT_DIR/server.out" 2>&1 &
  for _ in $(seq 1 60); do
    if "$RMQ_BIN/rabbitmqctl" -n "$RABBIT_NODE" await_startup --timeout 2 >/dev/null 2>&1; then break; fi
    sleep 1
  done
  RABBIT_PID="$("$RMQ_BIN/rabbitmqctl" -n "$RABBIT_NODE" eval 'list_to_integer(os:getpid()).' 2>/dev/null | tr -dc '0-9')"
  if [ -z "$RABBIT_PID" ]; then RABBIT_PID="$(pgrep -f 'beam.*sluicebench' | head -1)"; fi
  if [ -z "$RABBIT_PID" ]; then echo "RabbitMQ did not start; see $RABBIT_DIR/server.out" >&2; cat "$RABBIT_DIR/server.out" >&2; return 1; fi
  RABBIT_VERSION="$("$RMQ_BIN/rabbitmqctl" -n "$RABBIT_NODE" version 2>/dev/null || echo '?')"
  echo "RabbitMQ $RABBIT_VERSION started, pid $RABBIT_PID" >&2
}

rabbit_stop() {
  if [ -n "$RABBIT_DIR" ]; then
    "$RMQ_BIN/rabbitmqctl" -n "$RABBIT_NODE" stop >/dev/null 2>&1 || true
    rm -rf "$RABBIT_DIR"
    RABBIT_DIR=""
  fi
}
