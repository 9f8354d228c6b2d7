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
