#!/usr/bin/env bash
# Across workers on this machine (issue 11): our cross-worker all-reduce against raw
# MPI_Allreduce (and PyTorch's gloo), and the flagship's throughput on 2 workers x 1 device
# against 1 worker x 2 devices.
#
#   bench/compare_workers.sh [-R ROUNDS] [-e EPOCHS] [-b "G1 G2 ..."] [--max-bytes B] [--no-allreduce] [--no-gloo]
#     -R  rounds of the throughput runs (default 3): each round runs every layout once, in turn,
#         so that the VM's drift lands on all of them; the ratio is of the medians
#     -e  epochs per training run (default 3; MNIST, 60000 examples an epoch)
#     -b  global batch sizes (default "32 128"; 32 is the CLI's default)
#     --max-bytes  largest all-reduce buffer (default 268435456)
#     --no-allreduce  skip the all-reduce tables;  --no-gloo  skip PyTorch's gloo
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (default /usr/bin/python3, for gloo)
#
# The all-reduce tables (`lockstep bench allreduce --workers --devices cpu:1` under mpirun -np 2):
#   shared memory      the default for workers on one machine: lockstep's own segment (buffers
#                      up to a 4 MiB slot; larger ones over MPI's messages)
#   MPI, shm btl       LOCKSTEP_WORKER_SHM=0: MPI point-to-point, Open MPI's shared-memory transport
#   MPI, TCP           LOCKSTEP_WORKER_SHM=0 --mca btl self,tcp: the path of workers on a network
# each against MPI_Allreduce on the same buffers and the same transport, in the same run.
# Throughput (`lockstep train --epochs E --global-batch-size G`, train_steps_per_second):
#   1 x 2      one process, --devices cpu:2
#   2 x 1 shm  mpirun -np 2, --devices cpu:1 each (lockstep's segment)
#   2 x 1 mpi  the same with LOCKSTEP_WORKER_SHM=0
# Goal (issue 11): 2 x 1 >= 0.90 of 1 x 2; ours >= 90% of raw MPI at >= 1 MiB.
# Exit 1 if a run fails, 2 on bad usage, else 0 (whether or not goals are met).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,27p' "$0" >&2; exit 2; }
rounds=3
epochs=3
batches="32 128"
max_bytes=268435456
allreduce=1
gloo=1
while (($#)); do
  case "$1" in
    -R) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    -e) [[ $# -ge 2 ]] || usage; epochs="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; batches="$2"; shift 2 ;;
    --max-bytes) [[ $# -ge 2 ]] || usage; max_bytes="$2"; shift 2 ;;
    --no-allreduce) allreduce=0; shift ;;
    --no-gloo) gloo=0; shift ;;
    -h|--help) usage ;;
    *) echo "compare_workers: unknown argument '$1'" >&2; usage ;;
  esac
done
positive_ints "$rounds" "$epochs" "$max_bytes" $batches
for g in $batches; do
  if ((g % 2)); then echo "compare_workers: batch $g must be even (two replicas)" >&2; exit 2; fi
done
bench_bin bin LOCKSTEP_BIN lockstep
command -v mpirun > /dev/null || { echo "compare_workers: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores;" \
     "$(mpirun --version 2>/dev/null | head -1)"
if ((allreduce)); then
  table() {  # table TITLE [ENV...] -- [MPIRUN_ARGS...]
    local title="$1"; shift
    local envs=()
    while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
    shift
    echo "## all-reduce, $title"
    env "${envs[@]}" mpirun -np 2 "$@" "$bin" bench allreduce --workers --devices cpu:1 --max-bytes "$max_bytes" \
      | grep -v '^# PyTorch gloo' || { echo "compare_workers: the all-reduce bench failed ($title)" >&2; exit 1; }
  }
  table "shared memory (lockstep's segment)" LOCKSTEP_WORKER_SHM=1 --
  table "MPI messages, Open MPI's shared-memory transport" LOCKSTEP_WORKER_SHM=0 --
  table "MPI messages, TCP loopback" LOCKSTEP_WORKER_SHM=0 -- --mca btl self,tcp
  py="${REF_PYTHON:-/usr/bin/python3}"
  if ((gloo)) && "$py" -c "import torch.distributed" 2> /dev/null; then
    echo "## PyTorch gloo (TCP loopback), 2 processes"
    "$py" "$repo/bench/allreduce_gloo.py" --workers 2 --max-bytes "$max_bytes" || echo "(gloo failed)"
  else
    echo "## PyTorch gloo: skipped (no torch.distributed in $py, or --no-gloo)"
  fi
fi

steps_per_second() { "${REF_PYTHON:-/usr/bin/python3}" -c \
  "import json,sys; print('%.1f' % json.load(open(sys.argv[1]))['train_steps_per_second'])" "$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
train=(train --epochs "$epochs" --verbose 0 --no-tensorboard)
for g in $batches; do
  one="" shm="" mpi=""
  for ((r = 1; r <= rounds; ++r)); do
    "$bin" "${train[@]}" --global-batch-size "$g" --devices cpu:2 --logdir "$work/a" --metrics-out "$work/a.json" \
      > "$work/a.log" 2>&1 || { cat "$work/a.log"; echo "compare_workers: 1 x 2 failed" >&2; exit 1; }
    LOCKSTEP_WORKER_SHM=1 mpirun -np 2 "$bin" "${train[@]}" --global-batch-size "$g" --devices cpu:1 \
      --logdir "$work/b" --metrics-out "$work/b.json" > "$work/b.log" 2>&1 \
      || { cat "$work/b.log"; echo "compare_workers: 2 x 1 (shared memory) failed" >&2; exit 1; }
    LOCKSTEP_WORKER_SHM=0 mpirun -np 2 "$bin" "${train[@]}" --global-batch-size "$g" --devices cpu:1 \
      --logdir "$work/c" --metrics-out "$work/c.json" > "$work/c.log" 2>&1 \
      || { cat "$work/c.log"; echo "compare_workers: 2 x 1 (MPI messages) failed" >&2; exit 1; }
    one+=" $(steps_per_second "$work/a.json")"; shm+=" $(steps_per_second "$work/b.json")"
    mpi+=" $(steps_per_second "$work/c.json")"
    rm -rf "$work/a" "$work/b" "$work/c"
  done
  m1="$(echo "$one" | median)"; m2="$(echo "$shm" | median)"; m3="$(echo "$mpi" | median)"
  echo "## flagship MLP, global batch $g, $epochs epochs, train_steps_per_second per round (median)"
  echo "  1 worker x 2 devices:                $one  ($m1)"
  echo "  2 workers x 1 device, shared memory: $shm  ($m2)"
  echo "  2 workers x 1 device, MPI messages:  $mpi  ($m3)"
  awk -v a="$m1" -v b="$m2" -v c="$m3" 'BEGIN {printf "  ratio to 1 x 2 (goal >= 0.90): shared memory %.3f, MPI messages %.3f\n", b / a, c / a}'
done
