#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft) on 127.0.0.1 for development and tests. No Docker needed.
#
#   deploy/kafka/broker.sh start    fetch Kafka from Maven Central (cached), format storage if there is none, start,
#                                   wait until ready (a broker stopped with KAFKA_KEEP_DATA=1 restarts with its data)
#   deploy/kafka/broker.sh stop     stop it cleanly (and remove its data unless KAFKA_KEEP_DATA=1)
#   deploy/kafka/broker.sh wipe     stop it if it runs and remove its data
#   deploy/kafka/broker.sh status   say whether it runs and answers
#
# Topics are never created on their own (auto.create.topics.enable=false): the worker creates every topic with its
# partition count before it starts, and a producer cannot create one with the wrong count by writing to it.
#
# Settings (environment):
#   KAFKA_PORT        client port on 127.0.0.1 (default 9092); the controller uses KAFKA_PORT+1
#   KAFKA_HOME_DIR    where the broker's config, data, log and pid live (default: $CACHE/run-$KAFKA_PORT)
#   STREAMDEDUP_CACHE cache of downloaded jars, kept between runs (default: ~/.cache/streamdedup)
#   KAFKA_HEAP        JVM heap (default 768m)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${STREAMDEDUP_CACHE:-$HOME/.cache/streamdedup}"
LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT=$((PORT + 1))
RUN="${KAFKA_HOME_DIR:-$CACHE/run-$PORT}"
PIDFILE="$RUN/broker.pid"
LOG="$RUN/logs/server.log"

say() { printf 'broker: %s\n' "$*" >&2; }
# shellcheck source=deploy/pidfile.sh
. "$HERE/../pidfile.sh"

fetch() {
  if [ -f "$LIB/.complete" ] && [ "$LIB/.complete" -nt "$HERE/pom.xml" ]; then
    return
  fi
  command -v mvn >/dev/null || { say "Maven (mvn) is needed to fetch Kafka $KAFKA_VERSION"; exit 1; }
  command -v java >/dev/null || { say "Java 17+ is needed to run Kafka $KAFKA_VERSION"; exit 1; }
  say "fetching Apache Kafka $KAFKA_VERSION and its dependencies from Maven Central into $LIB"
  rm -rf "$LIB"
  mkdir -p "$LIB"
  mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIB" -DincludeScope=runtime >&2
  touch "$LIB/.complete"
}

answers() {
  # The broker answers when a TCP connection to its client port succeeds.
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

configure() {
  mkdir -p "$RUN/data" "$RUN/logs"
  cat > "$RUN/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$RUN/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=16777216
log.retention.hours=-1
log.cleaner.backoff.ms=1000
PROPS
}

start() {
  if running && answers; then
    say "already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
    return
  fi
  fetch
  configure
  local cp="$LIB/*"
  if [ -f "$RUN/data/meta.properties" ]; then
    say "keeping the existing storage in $RUN/data ('$0 wipe' removes it)"
  else
    local cluster_id
    cluster_id="$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    java -cp "$cp" -Dkafka.logs.dir="$RUN/logs" -Dlog4j2.configurationFile="$HERE/log4j2.yaml" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$RUN/server.properties" >"$RUN/logs/format.log" 2>&1 \
      || { say "formatting storage failed:"; cat "$RUN/logs/format.log" >&2; exit 1; }
  fi
  : >"$LOG" 2>/dev/null || true  # the readiness check below reads this start's log only
  say "starting Kafka $KAFKA_VERSION (KRaft) on 127.0.0.1:$PORT"
  nohup java -Xms256m -Xmx"${KAFKA_HEAP:-768m}" -XX:+UseG1GC -cp "$cp" \
    -Dkafka.logs.dir="$RUN/logs" -Dlog4j2.configurationFile="$HERE/log4j2.yaml" \
    kafka.Kafka "$RUN/server.properties" >"$RUN/logs/stdout.log" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 120); do
    if answers && grep -q "Kafka Server started\|\[KafkaRaftServer nodeId=1\] Kafka Server started" "$LOG" 2>/dev/null; then
      say "ready (pid $(cat "$PIDFILE"), log $LOG)"
      return
    fi
    if ! running; then
      say "the broker exited while starting; last lines of its log:"
      tail -n 40 "$LOG" "$RUN/logs/stdout.log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  say "the broker did not become ready within 60 s; last lines of its log:"
  tail -n 40 "$LOG" >&2 || true
  stop
  exit 1
}

stop() {
  stop_pidfile "$PIDFILE" 30
  if [ "${KAFKA_KEEP_DATA:-0}" != "1" ]; then
    rm -rf "$RUN/data"
  fi
}

wipe() {
  KAFKA_KEEP_DATA=0 stop
  rm -rf "$RUN"
  say "removed $RUN"
}

status() {
  if running && answers; then
    say "running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), Kafka $KAFKA_VERSION)"
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  wipe) wipe ;;
  fetch) fetch ;;
  *) echo "usage: $0 start|stop|wipe|status|fetch" >&2; exit 2 ;;
esac
