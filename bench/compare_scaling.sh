#!/usr/bin/env bash
# Data-parallel scaling of the flagship MNIST MLP on this machine's CPUs (issue 9): what `fit`
# keeps of what the strategy gains, strong and weak scaling, and TF / PyTorch on the same model.
#
#   bench/compare_scaling.sh [-n STEPS] [-r REF_STEPS] [-b "G1 G2 ..."] [-R ROUNDS] [--no-reference] [--json]
#     -n  timed lockstep steps per run (default 2000)
#     -R  rounds (default 1): all of a batch size's runs, references included, in turn, ROUNDS
#         times; figures are medians over the rounds and ratios medians of the per-round ratios
#         with their range (a shared VM drifts by tens of percent: never each side's best round)
#     -r  steps for the (slower) TF and torch runs (default 400)
#     -b  global batch sizes (default "128 256"; each must be even)
#     --no-reference  skip TF MirroredStrategy and torch DDP
#     --json  print one JSON object on stdout (progress goes to stderr)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), STRATEGY_OVERHEAD_BIN (default
#        build/bin/strategy_overhead), REF_PYTHON (as bench/compare_distributed.sh)
#
# For every global batch G, one run after another (never two at once, except the pair below):
#   one core     LOCKSTEP_CPU_THREADS=1, 1 replica           (the strong-scaling base)
#   1 replica    --devices cpu:1, all cores in its pool
#   2 replicas   --devices cpu:2, G/2 each, one core each
# each measured twice, back to back: bare Model::train_step (strategy_overhead --replicas R
# --batch G: no input pipeline, no callbacks) and `lockstep train --devices cpu:R
# --global-batch-size G` (fit with shuffle, batch, prefetch, metrics, callbacks); then
#   2 x one core  two one-core processes side by side (taskset -c 0 / -c 1, LOCKSTEP_CPU_THREADS=1),
#                 G/2 each, bare and train: the machine's own limit for two replicas that do not
#                 communicate (steps/s = the mean of the two);
#   TF / torch    bench/reference_distributed.py --replicas 1 and 2 at global batch G.
# Ratios printed, with the goals of issue 9:
#   fit / bare            train / train_step per configuration      (goal >= 0.90 for every one)
#   strong scaling        train 2 replicas / train one core, at G   (goal >= 1.6 at G = 128)
#   weak scaling          train 2 replicas at G / two one-core processes at G/2 (goal >= 0.95)
# Where build/bin/core_handoff is built (or $CORE_HANDOFF_BIN), each 2-replica run is labelled
# with where the host placed the two CPUs, probed for a second before and after it: "near" (SMT
# siblings sharing caches), "far" (two cores) or "mixed" (it moved). Two replicas of one process
# share cache lines every step and change speed with it; each round's label is printed.
# Exit 1 if a lockstep run fails, 2 on bad usage, else 0 (whether or not goals are met).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,37p' "$0" >&2; exit 2; }
steps=2000
ref_steps=400
batches="128 256"
rounds=1
reference=1
json=0
while (($#)); do
  case "$1" in
    -n) [[ $# -ge 2 ]] || usage; steps="$2"; shift 2 ;;
    -r) [[ $# -ge 2 ]] || usage; ref_steps="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; batches="$2"; shift 2 ;;
    -R) [[ $# -ge 2 ]] || usage; rounds="$2"; shift 2 ;;
    --no-reference) reference=0; shift ;;
    --json) json=1; shift ;;
    -h|--help) usage ;;
    *) echo "compare_scaling: unknown argument '$1'" >&2; usage ;;
  esac
done
positive_ints "$steps" "$ref_steps" "$rounds" $batches
[[ -n "${batches// /}" ]] || { echo "compare_scaling: -b needs at least one batch size" >&2; exit 2; }
if ((steps < 100 || ref_steps < 20)); then echo "compare_scaling: -n must be >= 100 and -r >= 20" >&2; exit 2; fi
for g in $batches; do
  if ((g < 2 || g % 2 || g > 12800)); then echo "compare_scaling: batch $g must be even and in [2, 12800]" >&2; exit 2; fi
done

bench_bin lockstep LOCKSTEP_BIN lockstep
bench_bin bare STRATEGY_OVERHEAD_BIN strategy_overhead
py="$(reference_python "$repo")"
cores="$(nproc)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
results="$tmp/results.txt"  # lines: KEY VALUE (steps/s, or FAILED)
: >"$results"
failed=0
note() { echo "== $*" >&2; }
record() { echo "$1 $2" >>"$results"; }

# The warm-up is 5% of the steps, as in fit; `lockstep train` runs that many more so that both
# time STEPS steps.
train_steps=$((steps + steps / 19))
run_bare() {  # KEY REPLICAS G [env...]: bare train_step; prints steps/s or FAILED
  local key="$1" r="$2" g="$3"; shift 3
  local out rc=0
  out="$(env "$@" "$bare" --replicas "$r" --batch "$g" --steps "$steps" 2>"$tmp/$key.err")" || rc=$?
  if [[ $rc -ne 0 || "$out" != steps_per_second* ]]; then
    echo "compare_scaling: $key: strategy_overhead failed (exit $rc): $(tail -n 3 "$tmp/$key.err")" >&2
    echo FAILED
    return 0
  fi
  echo "${out#steps_per_second }"
}
run_train() {  # KEY REPLICAS G [env...]: lockstep train; prints steps/s or FAILED
  local key="$1" r="$2" g="$3"; shift 3
  local rc=0
  env "$@" "$lockstep" train --devices "cpu:$r" --global-batch-size "$g" --epochs 1 --steps-per-epoch "$train_steps" \
    --verbose 0 --logdir "$tmp/run-$key-$round" --no-tensorboard --metrics-out "$tmp/$key.json" >"$tmp/$key.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "compare_scaling: $key: lockstep train failed (exit $rc); its last output:" >&2
    tail -n 5 "$tmp/$key.log" >&2
    echo FAILED
    return 0
  fi
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_steps_per_second"])' "$tmp/$key.json" ||
    echo FAILED
}
measure() {  # KEY VALUE: records it, counts failures
  record "$1" "$2"
  [[ "$2" != FAILED ]] || failed=1
}
probe_bin="${CORE_HANDOFF_BIN:-$repo/build/bin/core_handoff}"
[[ -x "$probe_bin" ]] && ((cores >= 2)) || probe_bin=""
probe() {  # near or far: the one-way hand-off between the first two CPUs over one second
  "$probe_bin" --seconds 1 --interval-ms 1000 --label
}
measure_placed() {  # KEY COMMAND...: measures like measure "$KEY" "$(COMMAND...)", labelled with the placement
  local key="$1" before="" after="" value; shift
  [[ -z "$probe_bin" ]] || before="$(probe)"
  value="$("$@")"
  [[ -z "$probe_bin" ]] || after="$(probe)"
  measure "$key" "$value"
  [[ -z "$probe_bin" ]] || echo "$key $value $([[ "$before" == "$after" ]] && echo "$before" || echo mixed)" >>"$placements"
}
placements="$tmp/placements"
: >"$placements"

for g in $batches; do
 for ((round = 1; round <= rounds; round++)); do
  ((rounds == 1)) || note "G=$g: round $round of $rounds"
  for cfg in core1 rep1 rep2; do
    case "$cfg" in
      core1) r=1; envs=(LOCKSTEP_CPU_THREADS=1); label="one core" ;;
      rep1) r=1; envs=(); label="1 replica, $cores cores" ;;
      rep2) r=2; envs=(); label="2 replicas" ;;
    esac
    note "G=$g, $label: bare train_step, then lockstep train ($steps timed steps each)"
    if ((r == 2)); then
      measure_placed "bare_${cfg}_$g" run_bare "bare_${cfg}_$g" "$r" "$g" "${envs[@]}"
      measure_placed "train_${cfg}_$g" run_train "train_${cfg}_$g" "$r" "$g" "${envs[@]}"
    else
      measure "bare_${cfg}_$g" "$(run_bare "bare_${cfg}_$g" "$r" "$g" "${envs[@]}")"
      measure "train_${cfg}_$g" "$(run_train "train_${cfg}_$g" "$r" "$g" "${envs[@]}")"
    fi
  done
  if ((cores >= 2)) && command -v taskset >/dev/null; then
    half=$((g / 2))
    for kind in bare train; do
      note "G=$g: two independent one-core processes side by side, $half each ($kind)"
      for c in 0 1; do
        "run_$kind" "pair_${kind}_${g}_$c" 1 "$half" LOCKSTEP_CPU_THREADS=1 taskset -c "$c" >"$tmp/pair_${kind}_${g}_$c.sps" &
      done
      wait
      a="$(cat "$tmp/pair_${kind}_${g}_0.sps")" b="$(cat "$tmp/pair_${kind}_${g}_1.sps")"
      if [[ "$a" == FAILED || "$b" == FAILED ]]; then
        measure "pair_${kind}_$g" FAILED
      else
        measure "pair_${kind}_$g" "$(python3 -c "print(($a + $b) / 2)")"
      fi
    done
  else
    note "G=$g: fewer than 2 cores (or no taskset): no independent-process reference"
  fi
  if ((reference)); then
    for r in 1 2; do
      note "G=$g: TF MirroredStrategy and torch DDP, $r replica(s), $ref_steps steps ($py)"
      rc=0
      "$py" "$repo/bench/reference_distributed.py" --framework both --replicas "$r" --global-batch-size "$g" \
        --steps "$ref_steps" --json >"$tmp/ref_${r}_$g.out" || rc=$?  # 3: a framework unavailable
      line="$(grep -v '^\s*$' "$tmp/ref_${r}_$g.out" | tail -n 1 || true)"
      for fw in tf torch; do
        v="$(python3 -c 'import json, sys; v = json.loads(sys.argv[1] or "{}").get(sys.argv[2]); print("n/a" if v is None else v)' \
          "$line" "$fw" 2>/dev/null || echo n/a)"
        record "${fw}_rep${r}_$g" "$v"
      done
    done
  fi
 done
done

python3 - "$results" "$batches" "$steps" "$ref_steps" "$json" "$cores" "$rounds" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" "$placements" <<'PYEOF'
import json, sys

path, batches, steps, ref_steps, as_json, cores, rounds, cpu, placement_path = sys.argv[1:10]
placed = {}  # (key, value) -> placement label, for the 2-replica runs
for line in open(placement_path):
    k, v, label = line.split()
    placed[(k, v)] = label
batches = [int(b) for b in batches.split()]
import statistics
vals = {}  # a key's figure in each round, in order (None where a run failed; the exit code says so)
for line in open(path):
    k, v = line.split()
    try:
        x = float(v)
    except ValueError:
        x = None
    vals.setdefault(k, []).append(x)
labels = {}  # a 2-replica key's placement in each round, where one was probed
for (k, v), label in placed.items():
    labels.setdefault(k, []).append(label)
def get(k):  # a key's median over its rounds
    got = [x for x in vals.get(k, []) if x is not None]
    return statistics.median(got) if got else None
def ratio(a, b):  # the median of a's and b's per-round ratios, with their range: (median, low, high)
    va, vb = vals.get(a, []), vals.get(b, [])
    rs = [x / y for x, y in zip(va, vb) if x is not None and y]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None
rows = [("core1", "one core (1 thread)"), ("rep1", f"1 replica ({cores} threads)"), ("rep2", "2 replicas")]
out = {"cpu": cpu, "cores": int(cores), "steps": int(steps), "rounds": int(rounds), "reference_steps": int(ref_steps),
       "batches": {}}
for g in batches:
    b = {}
    for key, _ in rows:
        b[key] = {"bare": get(f"bare_{key}_{g}"), "train": get(f"train_{key}_{g}"),
                  "fit_over_bare": ratio(f"train_{key}_{g}", f"bare_{key}_{g}"),
                  "placement": {"bare": labels.get(f"bare_{key}_{g}"), "train": labels.get(f"train_{key}_{g}")}}
    b["pair"] = {"bare": get(f"pair_bare_{g}"), "train": get(f"pair_train_{g}")}
    for fw in ("tf", "torch"):
        b[fw] = {"rep1": get(f"{fw}_rep1_{g}"), "rep2": get(f"{fw}_rep2_{g}")}
    b["strong_train"] = ratio(f"train_rep2_{g}", f"train_core1_{g}")
    b["strong_bare"] = ratio(f"bare_rep2_{g}", f"bare_core1_{g}")
    b["weak_train"] = ratio(f"train_rep2_{g}", f"pair_train_{g}")
    b["weak_bare"] = ratio(f"bare_rep2_{g}", f"pair_bare_{g}")
    for fw in ("tf", "torch"):  # lockstep train over the reference, one core and 2 replicas
        b[fw]["over"] = {"core1": ratio(f"train_core1_{g}", f"{fw}_rep1_{g}"), "rep2": ratio(f"train_rep2_{g}", f"{fw}_rep2_{g}")}
    out["batches"][str(g)] = b

goals = []
for g in batches:
    b = out["batches"][str(g)]
    for key, label in rows:
        goals.append((f"G={g} {label}: lockstep train / bare train_step >= 0.90", b[key]["fit_over_bare"], 0.90))
    if g == 128:
        goals.append((f"G={g} strong scaling: train 2 replicas / train one core >= 1.6", b["strong_train"], 1.6))
    goals.append((f"G={g} weak scaling: train 2 replicas / two one-core processes >= 0.95", b["weak_train"], 0.95))
out["goals"] = [{"goal": n, "value": None if v is None else v[0], "range": None if v is None else v[1:],
                 "met": None if v is None else v[0] >= t} for n, v, t in goals]

if as_json == "1":
    print(json.dumps(out))
    sys.exit(0)
f = lambda v: "n/a" if v is None else f"{v:.1f}"
r = lambda v: "n/a" if v is None else f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f})"
print(f"flagship MLP (Dense(128, relu) -> Dropout(0.2) -> Dense(10, softmax), Adam), MNIST; {cpu}, {cores} cores")
print(f"lockstep: {steps} timed steps per run; TF / torch: {ref_steps} steps; {rounds} interleaved round(s); global "
      "steps/s are medians over the rounds, ratios medians of the per-round ratios (range)")
print("TF / torch: bench/reference_distributed.py, 1 replica on one thread (one-core row), 2 replicas (last row)")
for g in batches:
    b = out["batches"][str(g)]
    print(f"\nglobal batch {g}")
    print(f"  {'configuration':36s} {'train_step':>10s} {'lockstep train':>14s} {'train/bare':>10s}"
          f" {'TF Mirrored':>11s} {'torch DDP':>10s}")
    ref_of = {"core1": "rep1", "rep2": "rep2"}  # the references' 1 replica runs on one thread
    for key, label in rows:
        ref = ref_of.get(key)
        tf = f(b["tf"][ref]) if ref else "-"
        torch = f(b["torch"][ref]) if ref else "-"
        print(f"  {label:36s} {f(b[key]['bare']):>10s} {f(b[key]['train']):>14s} {r(b[key]['fit_over_bare']):>10s}"
              f" {tf:>11s} {torch:>10s}")
    pl = b["rep2"]["placement"]
    if pl["bare"] or pl["train"]:
        print(f"    (2 replicas, CPUs placed by round: bare {', '.join(pl['bare'] or [])}; train {', '.join(pl['train'] or [])})")
    print(f"  {'2 x one core side by side, ' + str(g // 2) + ' each':36s} {f(b['pair']['bare']):>10s}"
          f" {f(b['pair']['train']):>14s}")
    print(f"  strong scaling (2 replicas / one core): train {r(b['strong_train'])}, bare {r(b['strong_bare'])}")
    print(f"  weak scaling (2 replicas / 2 x one core side by side): train {r(b['weak_train'])}, bare {r(b['weak_bare'])}")
    for fw, name in (("tf", "TF Mirrored"), ("torch", "torch DDP")):
        o = b[fw]["over"]
        print(f"  lockstep train / {name}: one core {r(o['core1'])}, 2 replicas {r(o['rep2'])}")
print("\ngoals (issue 9)")
for g in out["goals"]:
    state = "n/a" if g["met"] is None else ("met" if g["met"] else "NOT met")
    v = None if g["value"] is None else (g["value"], *g["range"])
    print(f"  {g['goal']:72s} {r(v):>21s}  {state}")
PYEOF
exit "$failed"
