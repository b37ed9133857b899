# shellcheck shell=bash
# Sourced by the scripts beside it (deploy/*/*.sh), which define `say`.

# Whether a process runs (a zombie left by a parent that has not reaped it does not).
alive() {
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != "Z" ]
}

# stop_pidfile PIDFILE SECONDS: stop the process PIDFILE names with SIGTERM, waiting up to SECONDS for it to exit
# before SIGKILL, and remove PIDFILE.
stop_pidfile() {
  local pidfile="$1" seconds="$2" pid
  if [ -f "$pidfile" ] && alive "$(cat "$pidfile")"; then
    pid="$(cat "$pidfile")"
    say "stopping (pid $pid)"
    kill "$pid" 2>/dev/null || true
    end_or_kill "$pid" "$seconds"
  fi
  rm -f "$pidfile"
}

# end_or_kill PID SECONDS: wait up to SECONDS for process PID to end, then SIGKILL it.
end_or_kill() {
  local pid="$1" seconds="$2"
  for _ in $(seq 1 $((seconds * 2))); do
    alive "$pid" || return 0
    sleep 0.5
  done
  say "still running after $seconds s; killing"
  kill -9 "$pid" 2>/dev/null || true
}
