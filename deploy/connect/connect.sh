#!/usr/bin/env bash
# A Kafka Connect worker (standalone mode) on 127.0.0.1 with the Debezium PostgreSQL connector, for development and
# tests. No Docker needed: it runs the Kafka Connect jars and the connector's plugin archive from Maven Central.
#
#   deploy/connect/connect.sh start [CONNECTOR.properties|CONNECTOR.json ...]
#                                   fetch the jars (cached), write the worker's settings, start the worker with the
#                                   connectors given (default: $CONNECT_CONNECTORS), wait until its REST API answers
#                                   and every connector and its tasks are RUNNING (the initial snapshot may still run:
#                                   wait-streaming waits for it). Offsets kept with CONNECT_KEEP_DATA=1 are resumed.
#   deploy/connect/connect.sh wait-streaming NAME
#                                   wait until the Debezium connector NAME has finished its snapshot (if it takes one)
#                                   and streams changes from the replication slot
#   deploy/connect/connect.sh stop  stop it cleanly (SIGTERM: tasks commit their offsets) and remove its offsets
#                                   unless CONNECT_KEEP_DATA=1
#   deploy/connect/connect.sh kill  SIGKILL the worker (crash tests): offsets not yet flushed are lost, the files stay
#   deploy/connect/connect.sh wipe  stop it if it runs and remove CONNECT_HOME_DIR
#   deploy/connect/connect.sh status
#                                   say whether it runs and answers, and each connector's state
#   deploy/connect/connect.sh fetch fetch the jars and the connector plugin only
#
# The broker must exist (deploy/kafka/broker.sh start) and creates no topics on its own: a source connector's config
# needs topic.creation.default.replication.factor=1 and topic.creation.default.partitions=N, with which the worker
# creates each topic before it first writes to it. Keys and values are JSON (JsonConverter); with
# CONNECT_SCHEMAS_ENABLE=false (the default) a message is the bare record, e.g. {"before":...,"after":...,"op":"c"};
# with true each key and value is wrapped as {"schema":{...},"payload":<the bare record>}.
# The worker resolves ${env:NAME} in connector configs from the environment (EnvVarConfigProvider); the example
# postgres-documents.properties reads the settings listed last below, which this script defaults.
#
# Settings (environment):
#   CONNECT_PORT           REST port on 127.0.0.1 (default 8083)
#   CONNECT_HOME_DIR       where the worker's settings, offsets, log and pid live
#                          (default: $CACHE/connect-$CONNECT_PORT)
#   KAFKA_BOOTSTRAP        the broker (default 127.0.0.1:$KAFKA_PORT, KAFKA_PORT defaulting to 9092)
#   CONNECT_OFFSETS_FILE   source offsets file (default: $CONNECT_HOME_DIR/data/offsets.dat; one set elsewhere is
#                          never removed by stop)
#   CONNECT_OFFSET_FLUSH_MS how often offsets are written and Debezium confirms its position to PostgreSQL
#                          (default 1000)
#   CONNECT_SCHEMAS_ENABLE true|false: JSON with or without the schema wrapper, keys and values (default false)
#   CONNECT_CONNECTORS     connector config files started when start has no arguments (space separated)
#   CONNECT_HEAP           JVM heap (default 512m)
#   STREAMDEDUP_CACHE      cache of downloaded jars, kept between runs (default: ~/.cache/streamdedup)
#   Read by postgres-documents.properties: PG_HOST (127.0.0.1), PG_PORT (5432), PG_DB (streamdedup),
#   PG_USER (postgres), CDC_SLOT (streamdedup_documents), CDC_PUBLICATION (streamdedup_documents),
#   CDC_TOPIC_PREFIX (streamdedup_pg), CDC_TOPIC_PARTITIONS (1)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_POM="$HERE/../kafka/pom.xml"  # the one place that pins Kafka's version
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM")"
LOG4J_VERSION="$(sed -n 's:.*<log4j.version>\(.*\)</log4j.version>.*:\1:p' "$KAFKA_POM")"
DEBEZIUM_VERSION="$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${STREAMDEDUP_CACHE:-$HOME/.cache/streamdedup}"
LIB="$CACHE/connect-$KAFKA_VERSION/lib"
PLUGINS="$CACHE/debezium-$DEBEZIUM_VERSION/plugins"
PORT="${CONNECT_PORT:-8083}"
RUN="${CONNECT_HOME_DIR:-$CACHE/connect-$PORT}"
BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-9092}}"
OFFSETS="${CONNECT_OFFSETS_FILE:-$RUN/data/offsets.dat}"
SCHEMAS="${CONNECT_SCHEMAS_ENABLE:-false}"
PIDFILE="$RUN/connect.pid"
LOG="$RUN/logs/connect.log"
URL="http://127.0.0.1:$PORT"

# Defaults for the variables the example connector config reads (${env:...}).
export PG_HOST="${PG_HOST:-127.0.0.1}" PG_PORT="${PG_PORT:-5432}" PG_DB="${PG_DB:-streamdedup}"
export PG_USER="${PG_USER:-postgres}" CDC_SLOT="${CDC_SLOT:-streamdedup_documents}"
export CDC_PUBLICATION="${CDC_PUBLICATION:-streamdedup_documents}"
export CDC_TOPIC_PREFIX="${CDC_TOPIC_PREFIX:-streamdedup_pg}" CDC_TOPIC_PARTITIONS="${CDC_TOPIC_PARTITIONS:-1}"

say() { printf 'connect: %s\n' "$*" >&2; }
# shellcheck source=deploy/pidfile.sh
. "$HERE/../pidfile.sh"

# The errors of this start's log and its last lines (the errors come first: a worker that stops logs many lines after).
show_log() {
  if grep -q " ERROR " "$LOG" 2>/dev/null; then
    say "errors in $LOG:"
    grep -A 3 " ERROR " "$LOG" | tail -n 30 >&2 || true
  fi
  say "last lines of $LOG:"
  tail -n "${1:-20}" "$LOG" >&2 || true
}

fetch() {
  if [ -f "$LIB/.complete" ] && [ "$LIB/.complete" -nt "$HERE/pom.xml" ] && [ "$LIB/.complete" -nt "$KAFKA_POM" ] \
    && [ -f "$PLUGINS/.complete" ] && [ "$PLUGINS/.complete" -nt "$HERE/pom.xml" ]; then
    return
  fi
  command -v mvn >/dev/null || { say "Maven (mvn) is needed to fetch Kafka Connect $KAFKA_VERSION"; exit 1; }
  command -v java >/dev/null || { say "Java 17+ is needed to run Kafka Connect $KAFKA_VERSION"; exit 1; }
  local versions=(-Dkafka.version="$KAFKA_VERSION" -Dlog4j.version="$LOG4J_VERSION")
  say "fetching Kafka Connect $KAFKA_VERSION and its dependencies from Maven Central into $LIB"
  rm -rf "$LIB"
  mkdir -p "$LIB"
  mvn -q -B -f "$HERE/pom.xml" "${versions[@]}" dependency:copy-dependencies \
    -DoutputDirectory="$LIB" -DincludeScope=runtime >&2
  touch "$LIB/.complete"
  say "fetching the Debezium PostgreSQL connector $DEBEZIUM_VERSION (plugin archive) into $PLUGINS"
  rm -rf "$PLUGINS"
  mkdir -p "$PLUGINS"
  mvn -q -B -f "$HERE/pom.xml" "${versions[@]}" -Dplugins.dir="$PLUGINS" dependency:unpack@connector-plugin >&2
  [ -d "$PLUGINS/debezium-connector-postgres" ] \
    || { say "the plugin archive did not unpack into $PLUGINS/debezium-connector-postgres"; exit 1; }
  touch "$PLUGINS/.complete"
}

running() {
  [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")"
}

answers() {
  curl -sf -o /dev/null --max-time 5 "$URL/"
}

# The connector's name in a config file: name=... (properties) or "name": "..." (JSON, {"name":..,"config":{..}}).
connector_name() {
  local file="$1" name
  case "$file" in
    *.json) name="$(sed -n 's/.*"name"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$file" | head -n 1)" ;;
    *) name="$(sed -n 's/^[[:space:]]*name[[:space:]]*[=:][[:space:]]*\(.*[^[:space:]]\)[[:space:]]*$/\1/p' "$file" \
      | head -n 1)" ;;
  esac
  [ -n "$name" ] || { say "no connector name in $file"; exit 1; }
  printf '%s\n' "$name"
}

# One connector's state as "CONNECTOR_STATE TASK_STATE..." (e.g. "RUNNING RUNNING"), or nothing if unknown yet.
states() {
  local body
  body="$(curl -sf --max-time 5 "$URL/connectors/$1/status" 2>/dev/null)" || return 0
  local connector tasks
  connector="$(printf '%s' "$body" | sed -n 's/.*"connector":{"state":"\([A-Z]*\)".*/\1/p')"
  tasks="$(printf '%s' "$body" | sed -n 's/.*"tasks":\[\(.*\)\].*/\1/p' | grep -o '"state":"[A-Z]*"' | cut -d'"' -f4 \
    | tr '\n' ' ')"
  printf '%s %s\n' "$connector" "$tasks"
}

configure() {
  mkdir -p "$RUN/logs" "$(dirname "$OFFSETS")"
  cat > "$RUN/worker.properties" <<PROPS
# Written by deploy/connect/connect.sh on every start.
bootstrap.servers=$BOOTSTRAP
listeners=http://127.0.0.1:$PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$PORT
plugin.path=$PLUGINS
plugin.discovery=service_load
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=$SCHEMAS
value.converter.schemas.enable=$SCHEMAS
offset.storage.file.filename=$OFFSETS
offset.flush.interval.ms=${CONNECT_OFFSET_FLUSH_MS:-1000}
topic.creation.enable=true
task.shutdown.graceful.timeout.ms=10000
config.providers=env
config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
producer.max.request.size=16777216
PROPS
}

start() {
  local files=("$@")
  if [ ${#files[@]} -eq 0 ] && [ -n "${CONNECT_CONNECTORS:-}" ]; then
    read -r -a files <<<"$CONNECT_CONNECTORS"
  fi
  if running && answers; then
    say "already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE")); '$0 stop' first to start other connectors"
    return
  fi
  command -v curl >/dev/null || { say "curl is needed to ask the worker's REST API whether it is ready"; exit 1; }
  local names=() file abs=()
  for file in "${files[@]}"; do
    [ -f "$file" ] || { say "no connector config $file"; exit 1; }
    abs+=("$(cd "$(dirname "$file")" && pwd)/$(basename "$file")")
    names+=("$(connector_name "$file")")
  done
  fetch
  configure
  if [ -s "$OFFSETS" ]; then
    say "resuming from the offsets in $OFFSETS ('$0 wipe' removes them)"
  fi
  : >"$LOG" 2>/dev/null || true  # the readiness checks below read this start's log only
  say "starting Kafka Connect $KAFKA_VERSION (standalone) on 127.0.0.1:$PORT with Debezium $DEBEZIUM_VERSION," \
    "broker $BOOTSTRAP${names[*]:+, connectors: ${names[*]}}"
  nohup java -Xms128m -Xmx"${CONNECT_HEAP:-512m}" -XX:+UseG1GC -cp "$LIB/*" \
    -Dkafka.logs.dir="$RUN/logs" -Dlog4j2.configurationFile="$HERE/log4j2.yaml" \
    org.apache.kafka.connect.cli.ConnectStandalone "$RUN/worker.properties" "${abs[@]}" \
    >"$RUN/logs/stdout.log" 2>&1 &
  echo $! >"$PIDFILE"
  local name state pending
  for _ in $(seq 1 360); do
    if ! running; then
      say "the worker exited while starting"
      show_log
      tail -n 20 "$RUN/logs/stdout.log" >&2 || true
      exit 1
    fi
    if answers; then
      pending=0
      for name in "${names[@]}"; do
        state="$(states "$name")"
        case " $state " in
          *" FAILED "*)
            say "connector $name failed ($state); its status:"
            curl -s "$URL/connectors/$name/status" >&2 || true
            echo >&2
            show_log
            stop
            exit 1 ;;
        esac
        # Ready: the connector RUNNING and at least one task, every one RUNNING.
        if ! [[ "$state" =~ ^RUNNING(\ RUNNING)+\ ?$ ]]; then
          pending=1
        fi
      done
      if [ "$pending" = 0 ]; then
        say "ready (pid $(cat "$PIDFILE"), REST $URL, log $LOG)"
        return
      fi
    fi
    sleep 0.5
  done
  say "the worker or its connectors did not become ready within 180 s"
  show_log 40
  stop
  exit 1
}

# Debezium logs "Snapshot completed" when its initial snapshot ends (or "Snapshot ended with SnapshotResult
# [status=SKIPPED" when it takes none) and then "Starting streaming", and finally "Processing messages" from the task
# once it reads the replication stream: that last line marks a connector that streams.
wait_streaming() {
  local name="${1:?usage: $0 wait-streaming NAME}"
  for _ in $(seq 1 600); do
    if grep -F "[$name|task-0]" "$LOG" 2>/dev/null | grep -q "Processing messages"; then
      say "$name streams changes (log $LOG)"
      return
    fi
    if ! running; then
      say "the worker is not running"
      show_log
      exit 1
    fi
    case " $(states "$name") " in
      *" FAILED "*)
        say "connector $name failed; its status:"
        curl -s "$URL/connectors/$name/status" >&2 || true
        echo >&2
        show_log
        exit 1 ;;
    esac
    sleep 0.5
  done
  say "$name did not start streaming within 300 s"
  show_log 40
  exit 1
}

stop() {
  stop_pidfile "$PIDFILE" 60
  if [ "${CONNECT_KEEP_DATA:-0}" != "1" ]; then
    rm -rf "$RUN/data"
  fi
}

crash() {
  if running; then
    local pid
    pid="$(cat "$PIDFILE")"
    say "killing (SIGKILL, pid $pid); offsets not yet flushed to $OFFSETS are lost"
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
      running || break
      sleep 0.25
    done
  else
    say "not running"
  fi
  rm -f "$PIDFILE"
}

wipe() {
  CONNECT_KEEP_DATA=0 stop
  rm -rf "$RUN"
  say "removed $RUN"
}

status() {
  if running && answers; then
    say "running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), Kafka Connect $KAFKA_VERSION, Debezium $DEBEZIUM_VERSION)"
    local name
    for name in $(curl -sf "$URL/connectors" | tr -d '[]"' | tr ',' ' '); do
      say "  $name: $(states "$name")"
    done
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  start) shift; start "$@" ;;
  wait-streaming) shift; wait_streaming "$@" ;;
  stop) stop ;;
  kill) crash ;;
  status) status ;;
  wipe) wipe ;;
  fetch) fetch ;;
  *) echo "usage: $0 start [CONNECTOR.properties|.json ...]|wait-streaming NAME|stop|kill|wipe|status|fetch" >&2
     exit 2 ;;
esac
