#!/usr/bin/env bash
# Every core of this machine (issue 38): the sgemm peak for a training step's shapes, lockstep's
# steps/s for layouts from one device on all cores to one device per core, PyTorch on as many
# threads, and each figure's share of the peak. Runs on any machine; needs only the build (and
# MNIST); PyTorch's figures are n/a where it is not importable.
#
#   bench/compare_cores.sh [-n STEPS] [-w WIDE_STEPS] [-b "G1 G2 ..."] [-H "H1 H2 ..."] [-R ROUNDS]
#                          [--no-reference] [--phases] [--json]
#     -n  timed steps per lockstep run of the flagship (hidden 128; default 300)
#     -w  timed steps per run of a wider MLP (default 40)
#     -b  global batch sizes (default "512 4096"); each a multiple of the core count
#     -H  hidden widths of the MLP 784 -> H -> 10 (default "128 4096": the flagship, the wide MLP)
#     -R  rounds (default 3): every configuration of a (model, batch) in turn, ROUNDS times;
#         a figure is the median of its rounds
#     --no-reference  skip PyTorch
#     --phases  also run the one-device-per-core layout once with LOCKSTEP_PHASE_TIMES=1 and
#               print where each replica's step time goes
#     --json  one JSON object on stdout (progress on stderr)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), GEMM_BENCH_BIN (default build/bin/gemm_bench),
#        LOCKSTEP_BIN_B: a second lockstep binary measured in the same rounds (each round runs
#        A and B one after the other, the order turning); prints B/A as the median of the
#        per-round ratios (issue 38's "nothing regresses", one run)
#        REF_PYTHON (default .venv-ref/bin/python, else /usr/bin/python3)
#
# For each width H and global batch G, with N = the cores this process may use:
#   sgemm peak, 1 core   gemm_bench --mlp 784,H,10 --batch G --threads 1 on one CPU: the five GEMMs
#                        of one step through lockstep's gemm on lockstep's buffers ("bound")
#   sgemm peak, N cores  N such processes at once, one per core, G/N rows each: their mean bound
#                        (what N replicas would reach if the step were GEMM alone)
#   lockstep             `lockstep train --hidden H --global-batch-size G` on one core
#                        (LOCKSTEP_CPU_THREADS=1, cpu:1), then --devices cpu:D for D = 1, 2, 4, ...
#                        up to N (each replica on N/D pinned cores: cpu:1 is one device on all
#                        cores, cpu:N one device per core); its train_steps_per_second
#   PyTorch              bench/reference_mlp.py --hidden H --batch G on 1 and on N threads (its BLAS is
#                        OpenBLAS where libopenblas0-pthread is installed: bench/run_all.sh installs it)
# Share of peak: the one-core row against the 1-core bound, the others against the N-core one.
# GFLOP/s are counted as 6 x parameters x batch (the usual convention; PERFORMANCE's tables).
# Exit 1 if a lockstep run failed, 2 on bad usage, else 0 (whatever the figures).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,36p' "$0" >&2; exit 2; }
steps=300 wide_steps=40 batches="512 4096" hiddens="128 4096" rounds=3 reference=1 phases=0 json=0
while (($#)); do
  case "$1" in
    -n|-w|-b|-H|-R) [[ $# -ge 2 ]] || usage
       case "$1" in -n) steps="$2" ;; -w) wide_steps="$2" ;; -b) batches="$2" ;; -H) hiddens="$2" ;; -R) rounds="$2" ;; esac
       shift 2 ;;
    --no-reference) reference=0; shift ;;
    --phases) phases=1; shift ;;
    --json) json=1; shift ;;
    -h|--help) usage ;;
    *) echo "compare_cores: unknown argument '$1'" >&2; usage ;;
  esac
done
cores="$(nproc)"
positive_ints "$steps" "$wide_steps" "$rounds" $batches $hiddens
[[ -n "${batches// /}" && -n "${hiddens// /}" ]] || { echo "compare_cores: -b and -H need a value" >&2; exit 2; }
for g in $batches; do
  ((g % cores == 0)) || { echo "compare_cores: batch $g is not a multiple of the $cores cores" >&2; exit 2; }
done
bench_bin lockstep LOCKSTEP_BIN lockstep
bench_bin gemm GEMM_BENCH_BIN gemm_bench
lockstep_b=""
[[ -z "${LOCKSTEP_BIN_B:-}" ]] || bench_bin lockstep_b LOCKSTEP_BIN_B lockstep
unset LOCKSTEP_BIN_B  # a build from before the variable existed would refuse it
py="$(reference_python "$repo")"
cpus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))'))  # the CPUs this process may use
layouts=()  # device counts: 1, 2, 4, ... and the core count
for ((d = 1; d < cores; d *= 2)); do layouts+=("$d"); done
layouts+=("$cores")

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
results="$tmp/results"  # lines: KEY VALUE
: >"$results"
failed=0
note() { echo "== $*" >&2; }

peak() {  # H G: records peak1 and peakN for the model
  local h="$1" g="$2" per=$(($2 / cores)) c
  note "H=$h G=$g: sgemm peak on 1 core, then on $cores cores ($per rows each)"
  taskset -c "${cpus[0]}" "$gemm" --mlp "784,$h,10" --batch "$g" --threads 1 --benchmark_filter=BM_Step \
    --benchmark_min_time=0.5 --benchmark_format=json >"$tmp/peak1.json" 2>/dev/null || true
  for ((c = 0; c < cores; c++)); do
    taskset -c "${cpus[$c]}" "$gemm" --mlp "784,$h,10" --batch "$per" --threads 1 --benchmark_filter=BM_Step \
      --benchmark_min_time=0.5 --benchmark_format=json >"$tmp/peakN.$c.json" 2>/dev/null &
  done
  wait
  python3 - "$tmp" "$cores" "$h" "$g" >>"$results" <<'PYEOF'
import json, sys
tmp, cores, h, g = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def b(path):
    try:
        return [x for x in json.load(open(path))["benchmarks"] if x["name"].startswith("BM_Step")][0]["bound"]
    except (OSError, ValueError, IndexError, KeyError):
        return None
one = b(f"{tmp}/peak1.json")
many = [b(f"{tmp}/peakN.{c}.json") for c in range(cores)]
print(f"peak1_{h}_{g} {one if one else 'FAILED'}")
print(f"peakN_{h}_{g} {sum(many) / cores if all(many) else 'FAILED'}")
PYEOF
}
train() {  # BIN KEY H G DEVICES STEPS [env...]: records KEY steps/s (or FAILED)
  local bin="$1" key="$2" h="$3" g="$4" d="$5" n="$6" rc=0 v; shift 6
  env "$@" "$bin" train --devices "cpu:$d" --hidden "$h" --global-batch-size "$g" --epochs 1 \
    --steps-per-epoch "$((n + n / 19 + 2))" --verbose 0 --logdir "$tmp/run" --no-tensorboard \
    --metrics-out "$tmp/m.json" >"$tmp/train.log" 2>&1 || rc=$?
  rm -rf "$tmp/run"
  if ((rc == 0)) && v="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_steps_per_second"])' "$tmp/m.json")"; then
    echo "$key $v" >>"$results"
  else
    echo "compare_cores: $key: lockstep train failed (exit $rc):" >&2
    tail -n 5 "$tmp/train.log" >&2
    echo "$key FAILED" >>"$results"
    failed=1
  fi
  rm -f "$tmp/m.json"
}

for h in $hiddens; do
  n=$steps
  ((h <= 128)) || n=$wide_steps
  for g in $batches; do
    peak "$h" "$g"
    for ((round = 1; round <= rounds; round++)); do
      note "H=$h G=$g: round $round of $rounds: one core, then cpu:${layouts[*]} ($n steps each)"
      for cfg in core1 "${layouts[@]}"; do
        if [[ "$cfg" == core1 ]]; then d=1; envs=(LOCKSTEP_CPU_THREADS=1 taskset -c "${cpus[0]}"); else d="$cfg"; envs=(); fi
        if [[ -n "$lockstep_b" ]] && ((round % 2 == 0)); then
          train "$lockstep_b" "B_${cfg}_${h}_$g" "$h" "$g" "$d" "$n" "${envs[@]}"
          train "$lockstep" "A_${cfg}_${h}_$g" "$h" "$g" "$d" "$n" "${envs[@]}"
        else
          train "$lockstep" "A_${cfg}_${h}_$g" "$h" "$g" "$d" "$n" "${envs[@]}"
          [[ -z "$lockstep_b" ]] || train "$lockstep_b" "B_${cfg}_${h}_$g" "$h" "$g" "$d" "$n" "${envs[@]}"
        fi
      done
    done
    if ((reference)); then
      for t in 1 "$cores"; do
        note "H=$h G=$g: PyTorch, $t thread(s) ($py)"
        ref_steps=$((n < 20 ? 20 : n))
        line="$("$py" "$repo/bench/reference_mlp.py" --framework torch --threads "$t" --batch "$g" --hidden "$h" \
          --steps "$ref_steps" --json 2>"$tmp/ref.err" | tail -n 1 || true)"
        v="$(python3 -c 'import json, sys; v = json.loads(sys.argv[1] or "{}").get("torch"); print("n/a" if v is None else v)' \
          "$line" 2>/dev/null || echo n/a)"
        [[ "$v" != n/a ]] || grep -m1 -i "unavailable\|failed" "$tmp/ref.err" >&2 || true
        echo "torch${t}_${h}_$g $v" >>"$results"
      done
    fi
  done
done
if ((phases)); then
  h="${hiddens##* }" g="${batches##* }"
  note "H=$h G=$g: cpu:$cores with LOCKSTEP_PHASE_TIMES=1"
  LOCKSTEP_PHASE_TIMES=1 "$lockstep" train --devices "cpu:$cores" --hidden "$h" --global-batch-size "$g" --epochs 1 \
    --steps-per-epoch "$((wide_steps + 12))" --verbose 0 --logdir "$tmp/run" --no-tensorboard 2>&1 |
    grep "phase times" >"$tmp/phases.txt" || true
fi

python3 - "$results" "$batches" "$hiddens" "$cores" "$rounds" "$json" "${layouts[*]}" "$tmp/phases.txt" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" "${lockstep_b:+1}" <<'PYEOF'
import json, statistics, sys

path, batches, hiddens, cores, rounds, as_json, layouts, phases_path, cpu, has_b = sys.argv[1:11]
cores, batches, hiddens = int(cores), [int(b) for b in batches.split()], [int(h) for h in hiddens.split()]
layouts = ["core1"] + layouts.split()
runs = {}
for line in open(path):
    k, v = line.split()
    runs.setdefault(k, []).append(None if v in ("FAILED", "n/a") else float(v))
med = lambda k: (lambda xs: statistics.median(xs) if xs else None)([x for x in runs.get(k, []) if x is not None])
params = lambda h: 784 * h + h + h * 10 + 10
out = {"cpu": cpu, "cores": cores, "rounds": int(rounds), "models": {}}
for h in hiddens:
    for g in batches:
        gflop = 6 * params(h) * g / 1e9
        p1, pn = med(f"peak1_{h}_{g}"), med(f"peakN_{h}_{g}")
        rows = {}
        for cfg in layouts:
            a = med(f"A_{cfg}_{h}_{g}")
            peak = p1 if cfg == "core1" else pn
            row = {"steps_per_s": a, "gflops": a * gflop if a else None,
                   "share_of_peak": a / peak if a and peak else None}
            if has_b:
                pairs = list(zip(runs.get(f"A_{cfg}_{h}_{g}", []), runs.get(f"B_{cfg}_{h}_{g}", [])))
                ratios = [b / a for a, b in pairs if a and b]
                row["B"] = med(f"B_{cfg}_{h}_{g}")
                row["B_over_A"] = statistics.median(ratios) if ratios else None
            rows[cfg] = row
        t1, tn = med(f"torch1_{h}_{g}"), med(f"torch{cores}_{h}_{g}")
        base = rows["core1"]["steps_per_s"]
        out["models"][f"{h}_{g}"] = {
            "hidden": h, "batch": g, "gflop_per_step": gflop, "peak_1core": p1, "peak_all": pn,
            "layouts": rows, "torch_1thread": t1, f"torch_{cores}threads": tn,
            "strong_scaling": {cfg: (rows[cfg]["steps_per_s"] / base if base and rows[cfg]["steps_per_s"] else None)
                               for cfg in layouts[1:]},
            "over_torch_1core": base / t1 if base and t1 else None,
            "over_torch_all": {cfg: (rows[cfg]["steps_per_s"] / tn if tn and rows[cfg]["steps_per_s"] else None)
                               for cfg in layouts[1:]}}
try:
    out["phase_times"] = [l.rstrip() for l in open(phases_path)]
except OSError:
    out["phase_times"] = []
if as_json == "1":
    print(json.dumps(out))
    sys.exit(0)
f = lambda v, d=1: "n/a" if v is None else f"{v:.{d}f}"
print(f"MLP 784 -> H -> 10 (Dense relu, Dropout 0.2, Dense softmax, Adam) on MNIST; {cpu}, {cores} cores; "
      f"median of {rounds} round(s)")
print("peak: bench/gemm_bench BM_Step (the step's five GEMMs through lockstep's gemm, its buffers); "
      "GFLOP/s = 6 x params x batch x steps/s")
for m in out["models"].values():
    print(f"\nhidden {m['hidden']}, global batch {m['batch']} ({m['gflop_per_step']:.2f} GFLOP a step): "
          f"sgemm peak {f(m['peak_1core'])} steps/s on 1 core, {f(m['peak_all'])} on {cores}")
    hdr = f"  {'layout':28s} {'steps/s':>9s} {'GFLOP/s':>8s} {'of peak':>8s} {'x 1 core':>8s} {'x torch':>8s}"
    print(hdr + ("  B steps/s  B/A" if has_b else ""))
    for cfg, r in m["layouts"].items():
        label = "one core (1 thread)" if cfg == "core1" else f"cpu:{cfg} ({cores // int(cfg)} thread(s) each)"
        scale = "-" if cfg == "core1" else f(m["strong_scaling"][cfg], 2)
        vs = f(m["over_torch_1core"], 2) if cfg == "core1" else f(m["over_torch_all"][cfg], 2)
        share = "n/a" if r["share_of_peak"] is None else f"{100 * r['share_of_peak']:.0f}%"
        line = f"  {label:28s} {f(r['steps_per_s']):>9s} {f(r['gflops']):>8s} {share:>8s} {scale:>8s} {vs:>8s}"
        if has_b:
            line += f"  {f(r['B']):>9s}  {f(r['B_over_A'], 3)}"
        print(line)
    print(f"  PyTorch: {f(m['torch_1thread'])} steps/s on 1 thread, {f(m[f'torch_{cores}threads'])} on {cores}")
if out["phase_times"]:
    print("\nwhere the time goes (LOCKSTEP_PHASE_TIMES=1, one device per core):")
    for l in out["phase_times"]:
        print("  " + l)
PYEOF
exit "$failed"
