#!/usr/bin/env bash
# Runs every benchmark behind docs/PERFORMANCE.md, one after another, on an idle machine.
#   bench/run_all.sh [OUT_DIR]     (default: bench-results/)
# Needs build/ (scripts/build.sh) and, for the references, .venv-ref (scripts/setup_python.sh).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
out="${1:-$repo/bench-results}"
mkdir -p "$out"
cd "$repo"
openblas_check --install  # the references' best configuration (bench/lib.sh)
libtorch_check --install  # the C++ reference (bench/reference_libtorch.cpp)
run() { local name="$1"; shift; echo "== $name: $*"; "$@" 2>&1 | tee "$out/$name.txt"; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(date -u)" | tee "$out/machine.txt"
run gemm build/bin/gemm_bench --benchmark_min_time=0.2
run allreduce build/bin/lockstep bench allreduce
command -v mpirun > /dev/null && run compare_workers bash bench/compare_workers.sh -R 5
run strategy_overhead build/bin/strategy_overhead 1000 5
run pipeline build/bin/pipeline_bench
run compare_mlp_1thread bash bench/compare_mlp.sh -t 1 -n 3000 -R 3
run compare_mlp_2threads bash bench/compare_mlp.sh -t 2 -n 3000 -R 3
run compare_distributed bash bench/compare_distributed.sh -n 3000 -r 1000
run compare_scaling bash bench/compare_scaling.sh -n 1500 -r 300 -R 3
run fit_overhead_1replica build/bin/fit_overhead --replicas 1 --rounds 15
run fit_overhead_2replicas build/bin/fit_overhead --replicas 2 --rounds 15
run fit_host_cost env LOCKSTEP_EMULATED_GPUS=1 build/bin/fit_host_cost
if command -v mpirun > /dev/null; then
  run compare_shard_update bash bench/compare_shard_update.sh -R 6 -b "32 128 256" -w
else
  run compare_shard_update bash bench/compare_shard_update.sh -R 6
fi
run conv_pool env LOCKSTEP_CPU_THREADS=1 build/bin/conv_pool_bench
run compare_cnn bash bench/compare_cnn.sh -t 2 -n 300 -b 128 -r 3
run compare_resnet20 bash bench/compare_cnn.sh -m resnet20 -t 2 -n 100 -b 128 -r 3
run attention build/bin/attention_bench 2
run compare_transformer bash bench/compare_transformer.sh -t 2 -n 200 -r 3
[[ -x .venv-py/bin/python || -n "${LOCKSTEP_PY_PKG_VENV:-}" ]] && run compare_rnn bash bench/compare_rnn.sh -R 3
run compare_commits bash bench/compare_commits.sh
run mixed_precision build/bin/mixed_precision_bench --steps 30 --rounds 3
[[ -x .venv-ref/bin/python ]] && run mixed_precision_tf .venv-ref/bin/python bench/reference_mixed_precision.py --steps 30 --rounds 3
