#!/usr/bin/env bash
# A PostgreSQL cluster of its own on 127.0.0.1, ready for logical decoding (Debezium), for development and tests.
# No Docker needed: it runs the server binaries installed on the machine (Debian: apt-get install postgresql).
#
#   deploy/postgres/postgres.sh start    create the cluster if there is none (initdb), start it, wait until it
#                                        accepts connections, create the database PG_DB if missing
#                                        (a cluster stopped with PG_KEEP_DATA=1 restarts with its data)
#   deploy/postgres/postgres.sh stop     stop it cleanly (fast shutdown) and remove its data unless PG_KEEP_DATA=1
#   deploy/postgres/postgres.sh kill     SIGKILL the server (crash tests); its data stays, the next start recovers it
#   deploy/postgres/postgres.sh wipe     stop it if it runs and remove PG_HOME_DIR
#   deploy/postgres/postgres.sh status   say whether it runs and answers
#   deploy/postgres/postgres.sh psql ... run psql on PG_DB as PG_USER (arguments passed on, e.g. -c 'select 1')
#
# The server listens on 127.0.0.1 only, with its unix socket in PG_HOME_DIR/socket, and trusts every local and
# loopback connection without a password (pg_hba.conf "trust"): for development and tests only, never for real data.
# wal_level=logical, max_replication_slots=20 and max_wal_senders=20, so a change-data-capture connector (pgoutput)
# can create its replication slot and publication. PG_USER is the cluster's bootstrap superuser, which has
# REPLICATION; connect as it: postgresql://PG_USER@127.0.0.1:PG_PORT/PG_DB.
#
# PostgreSQL refuses to run as root. Run as root, the script runs initdb, pg_ctl and the server as PG_OS_USER
# (default: "postgres" when that user exists, as the Debian package creates it, else a system user "streamdedup" that
# it creates with useradd) and gives PG_HOME_DIR to that user. That user must be able to reach PG_HOME_DIR: when the
# default one lies under a directory closed to it (root's home is mode 0700), the default becomes
# /var/tmp/streamdedup/pg-PG_PORT instead; an explicit PG_HOME_DIR it cannot reach is an error.
#
# Settings (environment):
#   PG_PORT           port on 127.0.0.1 (default 5432)
#   PG_HOME_DIR       where the cluster's data, socket, log and settings live (default: $CACHE/pg-$PG_PORT)
#   PG_DB             database created on start (default streamdedup)
#   PG_USER           superuser role (default postgres)
#   PG_OS_USER        operating-system user that runs the server when the script runs as root (see above)
#   PG_BINDIR         directory of initdb/pg_ctl/postgres (default: `pg_config --bindir`, else the newest
#                     /usr/lib/postgresql/*/bin)
#   STREAMDEDUP_CACHE shared cache directory (default: ~/.cache/streamdedup)
set -euo pipefail

CACHE="${STREAMDEDUP_CACHE:-$HOME/.cache/streamdedup}"
PORT="${PG_PORT:-5432}"
DB="${PG_DB:-streamdedup}"
PGUSER_NAME="${PG_USER:-postgres}"

say() { printf 'postgres: %s\n' "$*" >&2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/pidfile.sh
. "$HERE/../pidfile.sh"

bindir() {
  local dir
  if [ -n "${PG_BINDIR:-}" ]; then
    dir="$PG_BINDIR"
  elif command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
    dir="$(pg_config --bindir)"
  else
    dir="$(printf '%s\n' /usr/lib/postgresql/*/bin | grep -v '\*' | sort -V | tail -n 1)"
  fi
  if [ -z "$dir" ] || [ ! -x "$dir/initdb" ] || [ ! -x "$dir/pg_ctl" ]; then
    say "PostgreSQL's server binaries (initdb, pg_ctl) were not found; install them (Debian: apt-get install" \
      "postgresql) or set PG_BINDIR"
    exit 1
  fi
  printf '%s\n' "$dir"
}

# As root, everything that touches the cluster runs as OS_USER; otherwise as the caller.
OS_USER=""
if [ "$(id -u)" -eq 0 ]; then
  if [ -n "${PG_OS_USER:-}" ]; then
    OS_USER="$PG_OS_USER"
  elif id postgres >/dev/null 2>&1; then
    OS_USER=postgres
  else
    OS_USER=streamdedup
  fi
fi

as_owner() {
  if [ -n "$OS_USER" ]; then
    runuser -u "$OS_USER" -- "$@"
  else
    "$@"
  fi
}

ensure_os_user() {
  [ -n "$OS_USER" ] || return 0
  if ! id "$OS_USER" >/dev/null 2>&1; then
    say "creating the system user $OS_USER to run PostgreSQL (it refuses to run as root)"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$OS_USER"
  fi
}

# Whether OS_USER can reach a directory: it must be able to search every directory that exists on the way to it.
reachable() {
  local dir="$1"
  [ -n "$OS_USER" ] || return 0
  id "$OS_USER" >/dev/null 2>&1 || return 0  # created later; only a closed parent can make the test fail
  while [ ! -d "$dir" ]; do dir="$(dirname "$dir")"; done
  runuser -u "$OS_USER" -- test -x "$dir"
}

if [ -n "${PG_HOME_DIR:-}" ]; then
  RUN="$PG_HOME_DIR"
else
  RUN="$CACHE/pg-$PORT"
  if [ -n "$OS_USER" ] && ! reachable "$CACHE"; then
    RUN="/var/tmp/streamdedup/pg-$PORT"
  fi
fi
DATA="$RUN/data"
SOCKET="$RUN/socket"
LOG="$RUN/logs/postgres.log"

# Whether a process lives (an exited one that nobody has reaped yet does not).
running() {
  [ -f "$DATA/postmaster.pid" ] && alive "$(head -n 1 "$DATA/postmaster.pid")"
}

answers() {
  "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$PGUSER_NAME" -d postgres 2>/dev/null
}

client() {
  # Clients connect over TCP on loopback (trusted), so the socket directory's permissions do not matter.
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$PGUSER_NAME" "$@"
}

configure() {
  cat > "$DATA/streamdedup.conf" <<CONF
# Written by deploy/postgres/postgres.sh on every start; postgresql.conf includes it.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCKET'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_connections = 100
shared_buffers = 128MB
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
log_min_messages = warning
log_replication_commands = on
CONF
  grep -q "^include_if_exists = 'streamdedup.conf'" "$DATA/postgresql.conf" \
    || echo "include_if_exists = 'streamdedup.conf'" >> "$DATA/postgresql.conf"
  cat > "$DATA/pg_hba.conf" <<HBA
# Written by deploy/postgres/postgres.sh: every local and loopback connection is trusted (development and tests only).
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
host    all          all   127.0.0.1/32   trust
host    all          all   ::1/128        trust
local   replication  all                  trust
host    replication  all   127.0.0.1/32   trust
host    replication  all   ::1/128        trust
HBA
}

start() {
  BIN="$(bindir)"
  if running && answers; then
    say "already running on 127.0.0.1:$PORT (pid $(head -n 1 "$DATA/postmaster.pid"), data $DATA)"
    return
  fi
  ensure_os_user
  if [ -n "$OS_USER" ] && ! reachable "$RUN"; then
    say "the user $OS_USER, which runs PostgreSQL, cannot reach $RUN (a directory on the way is closed to it);" \
      "set PG_HOME_DIR to a directory it can reach, e.g. /var/tmp/streamdedup/pg-$PORT"
    exit 1
  fi
  mkdir -p "$RUN/logs" "$SOCKET"
  [ -z "$OS_USER" ] || chown -R "$OS_USER:" "$RUN"
  if [ -f "$DATA/PG_VERSION" ]; then
    say "keeping the existing cluster in $DATA ('$0 wipe' removes it)"
    # A server killed a moment ago can linger as a zombie until it is reaped, which the server's own check of its lock
    # files takes for a running server; no server runs here (checked above), so they are stale.
    local lock
    for lock in "$DATA/postmaster.pid" "$SOCKET/.s.PGSQL.$PORT.lock"; do
      if [ -f "$lock" ] && ! alive "$(head -n 1 "$lock")"; then
        rm -f "$lock"
      fi
    done
  else
    rm -rf "$DATA"
    (cd "$RUN" && as_owner "$BIN/initdb" -D "$DATA" -U "$PGUSER_NAME" --auth=trust --encoding=UTF8 --locale=C \
      --no-sync) >"$RUN/logs/initdb.log" 2>&1 \
      || { say "initdb failed:"; cat "$RUN/logs/initdb.log" >&2; exit 1; }
  fi
  configure
  [ -z "$OS_USER" ] || chown "$OS_USER:" "$DATA/streamdedup.conf" "$DATA/pg_hba.conf"
  : >"$LOG"
  [ -z "$OS_USER" ] || chown "$OS_USER:" "$LOG"
  say "starting PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT"
  # pg_ctl -w returns once the server accepts connections, or fails when it exits while starting.
  if ! (cd "$RUN" && as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null 2>&1) || ! answers; then
    say "the server did not start within 60 s; last lines of its log:"
    tail -n 40 "$LOG" >&2 || true
    stop
    exit 1
  fi
  if [ "$(client -d postgres -tAc "select 1 from pg_database where datname = '$DB'")" != "1" ]; then
    client -d postgres -c "create database \"$DB\""
  fi
  say "ready (pid $(head -n 1 "$DATA/postmaster.pid"), postgresql://$PGUSER_NAME@127.0.0.1:$PORT/$DB, log $LOG)"
}

stop() {
  BIN="$(bindir)"
  if running; then
    local pid
    pid="$(head -n 1 "$DATA/postmaster.pid")"
    say "stopping (pid $pid)"
    (cd "$RUN" && as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null 2>&1) || true
    # pg_ctl returns when the server has removed its pid file, a moment before the process ends.
    end_or_kill "$pid" 10
  fi
  if [ "${PG_KEEP_DATA:-0}" != "1" ]; then
    rm -rf "$DATA"
  fi
}

crash() {
  if running; then
    local pid children
    pid="$(head -n 1 "$DATA/postmaster.pid")"
    children="$(pgrep -P "$pid" || true)"
    say "killing (SIGKILL, pid $pid and its children); the data stays and the next start recovers it"
    # shellcheck disable=SC2086
    kill -9 "$pid" $children 2>/dev/null || true
    local p left
    for _ in $(seq 1 120); do
      left=0
      for p in $pid $children; do
        if alive "$p"; then left=1; fi
      done
      [ "$left" = 1 ] || break
      sleep 0.25
    done
  else
    say "not running"
  fi
}

wipe() {
  PG_KEEP_DATA=0 stop
  rm -rf "$RUN"
  say "removed $RUN"
}

status() {
  BIN="$(bindir)"
  if running && answers; then
    say "running on 127.0.0.1:$PORT (pid $(head -n 1 "$DATA/postmaster.pid"), data $DATA)"
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) crash ;;
  status) status ;;
  wipe) wipe ;;
  psql) shift; BIN="$(bindir)"; client -d "$DB" "$@" ;;
  *) echo "usage: $0 start|stop|kill|wipe|status|psql [psql arguments]" >&2; exit 2 ;;
esac
