# Sourced by the mpirun CLI tests.
# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun), waiting up to 5 s
rank_pid() {
  local p
  for _ in $(seq 100); do
    for p in $(pgrep -P "$1"); do
      if { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
        echo "$p"; return
      fi
    done
    sleep 0.05
  done
}

# descendants PID: every process below PID, deepest first
descendants() {
  local c
  for c in $(pgrep -P "$1"); do descendants "$c"; echo "$c"; done
}

# show_processes: the process tree below this test, for a failure's report
show_processes() {
  echo "--- processes below the test (pid ppid state elapsed command):"
  local p
  for p in $(descendants "$$"); do ps -o pid=,ppid=,stat=,etime=,args= -p "$p" 2>/dev/null; done
}

# watchdog SECONDS: if the test still runs after SECONDS, report what it waits on (the process
# tree and the logs' tails in the current directory), then kill everything below the test and the
# test itself. Set it below ctest's TIMEOUT, so a hang is reported with its cause. The watchdog
# and its sleep end with the test (ctest waits for every holder of the test's output).
watchdog() {
  local test_pid=$$ limit="$1" dir="$PWD"
  (
    sleep "$limit" > /dev/null 2>&1 &
    sleep_pid=$!
    trap 'kill "$sleep_pid" 2>/dev/null; exit 0' TERM
    wait "$sleep_pid"
    echo "FAIL: the test is still running after ${limit} s"
    show_processes
    for f in "$dir"/*.log; do [[ -f "$f" ]] && { echo "--- tail of $f:"; tail -n 20 "$f"; }; done
    for p in $(descendants "$test_pid"); do [[ "$p" == "$BASHPID" ]] || kill -KILL "$p" 2>/dev/null; done
    kill -KILL "$test_pid"
  ) &
  watchdog_pid=$!
  trap 'kill -TERM "$watchdog_pid" 2>/dev/null' EXIT
}

# wait_bounded PID SECONDS WHAT: waits for a background job and returns its status; fails the
# test (exit 1), showing the process tree, if it still runs after SECONDS
wait_bounded() {
  local pid="$1" limit="$2" what="$3" t0=$SECONDS p
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS - t0 >= limit )); then
      echo "FAIL: $what did not finish within ${limit} s"; show_processes
      for p in $(descendants "$pid") "$pid"; do kill -KILL "$p" 2>/dev/null; done
      exit 1
    fi
    sleep 0.1
  done
  wait "$pid"
}

# bounded SECONDS LOG CMD...: runs CMD with its output in LOG and returns its status; fails the
# test as wait_bounded does if it still runs after SECONDS
bounded() {
  local limit="$1" log="$2"; shift 2
  "$@" > "$log" 2>&1 &
  wait_bounded "$!" "$limit" "'$*'"
}
