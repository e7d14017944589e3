# Sourced by the test scripts that start loom in the background: they wait on the event itself (a
# process ended, a file grew, a line appeared), never assert how long it took. Each wait has one
# generous outer limit, LOOM_TEST_PATIENCE seconds (90 unless set), only against a hang; when it
# runs out, the wait fails naming what it waited for and listing the processes still running under
# the script. The script defines fail() (its message, exit 1) before calling these.
patience=${LOOM_TEST_PATIENCE:-90}

# The processes under PID (children first, then theirs).
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# What still runs under this script: pid, seconds running, command line.
still_running() {
  local pids
  pids=$(descendants $$ | grep -vx "$BASHPID" | paste -sd, -)
  [ -n "$pids" ] && ps -o pid=,etimes=,args= -p "$pids" | grep -v ' ps -o ' | cut -c1-200
}

# Whether PID has ended (a zombie has: it only waits to be reaped).
ended() {
  local state
  ! state=$(ps -o stat= -p "$1" 2>/dev/null) || [ "${state:0:1}" = Z ]
}

# wait_until WHAT COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local what=$1 deadline=$((SECONDS + patience))
  shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || fail "waited $patience s for $what; still running:
$(still_running)"
    sleep 0.1
  done
}

# wait_exit PID WHAT: waits for the background job PID to end; its exit code in rc.
wait_exit() {
  wait_until "$2 to end" ended "$1"
  wait "$1"
  rc=$?
}

# has_lines FILE N: FILE exists and holds at least N lines.
has_lines() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

# none_left PATTERN: no process has PATTERN in its command line (pgrep -f).
none_left() { ! pgrep -f -- "$1" >/dev/null; }
