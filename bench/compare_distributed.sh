#!/usr/bin/env bash
# Compares lockstep's synchronous data-parallel training throughput on the flagship
# MNIST MLP with TF MirroredStrategy and PyTorch DDP, on this machine's CPUs.
#
#   bench/compare_distributed.sh [-n STEPS] [-r REF_STEPS] [-b GLOBAL_BATCH] [--json]
#     -n  lockstep steps per run (default 2000)
#     -r  steps for the (slower) TF and torch runs (default: STEPS)
#     -b  global batch size (default 128; must be even)
#     --json  print one JSON object on stdout (progress goes to stderr)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (default .venv-ref/bin/python,
#        else /usr/bin/python3)
#
# Runs, one after another (never two at once, so they never share cores):
#   lockstep 1 replica:  lockstep train --devices cpu:1 --global-batch-size G ...
#   lockstep 2 replicas: lockstep train --devices cpu:2 --global-batch-size G ...  (G/2 per replica)
#   TF MirroredStrategy, 2 logical CPU devices, and torch DDP (gloo, 2 processes x 1 thread):
#                        bench/reference_distributed.py --framework both --steps REF_STEPS --json
# then prints global steps/s and examples/s of each, and the ratios
# lockstep(2) / max(TF Mirrored, torch DDP) (goal >= 3x) and lockstep(2) / lockstep(1).
# A reference that cannot run is reported as unavailable. Exit 1 if a lockstep run
# fails (or its output is unreadable), 2 on bad usage, else 0.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
usage() { sed -n '2,21p' "$0" >&2; exit 2; }
steps=2000
ref_steps=""
gbs=128
json=0
while (($#)); do
  case "$1" in
    -n) [[ $# -ge 2 ]] || usage; steps="$2"; shift 2 ;;
    -r) [[ $# -ge 2 ]] || usage; ref_steps="$2"; shift 2 ;;
    -b) [[ $# -ge 2 ]] || usage; gbs="$2"; shift 2 ;;
    --json) json=1; shift ;;
    -h|--help) usage ;;
    *) echo "compare_distributed: unknown argument '$1'" >&2; usage ;;
  esac
done
ref_steps="${ref_steps:-$steps}"
positive_ints "$steps" "$ref_steps" "$gbs"
if ((steps < 20 || ref_steps < 20)); then echo "compare_distributed: -n and -r must be >= 20" >&2; exit 2; fi
if ((gbs < 2 || gbs % 2)); then echo "compare_distributed: -b must be even (split over 2 replicas)" >&2; exit 2; fi

bench_bin lockstep LOCKSTEP_BIN lockstep
py="$(reference_python "$repo")"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

ls_fail=0
for n in 1 2; do
  echo "== lockstep, $n replica(s) (--devices cpu:$n), global batch $gbs, $steps steps" >&2
  rc=0
  "$lockstep" train --devices "cpu:$n" --global-batch-size "$gbs" --epochs 1 --steps-per-epoch "$steps" \
    --verbose 0 --logdir "$tmp/run$n" --no-tensorboard --metrics-out "$tmp/lockstep$n.json" >"$tmp/lockstep$n.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "compare_distributed: lockstep train --devices cpu:$n failed (exit $rc); its last output:" >&2
    tail -n 20 "$tmp/lockstep$n.log" >&2
    ls_fail=1
  fi
done

echo "== TF MirroredStrategy and torch DDP references, $ref_steps steps ($py)" >&2
if [[ -x "$py" ]]; then
  "$py" "$repo/bench/reference_distributed.py" --framework both --replicas 2 --global-batch-size "$gbs" \
    --steps "$ref_steps" --json >"$tmp/ref.out" || true   # exit 3 = a framework unavailable; reported below
else
  echo "compare_distributed: no Python interpreter at $py: references unavailable" >&2
fi

summary_py="$py"
[[ -x "$summary_py" ]] || summary_py=/usr/bin/python3
"$summary_py" - "$tmp" "$steps" "$ref_steps" "$gbs" "$json" "$ls_fail" <<'PYEOF'
import json, sys

tmp, steps, ref_steps, gbs, as_json, ls_fail = sys.argv[1:7]
steps, ref_steps, gbs, as_json, ls_fail = int(steps), int(ref_steps), int(gbs), as_json == "1", ls_fail == "1"
err = lambda msg: print(f"compare_distributed: {msg}", file=sys.stderr)

runs = {}  # name -> (label, replicas, steps, steps/s or None)
for n in (1, 2):
    sps = None
    try:
        with open(f"{tmp}/lockstep{n}.json") as f:
            j = json.load(f)
        sps = float(j["train_steps_per_second"])
        if int(j.get("replicas", n)) != n or int(j.get("global_batch_size", gbs)) != gbs:
            err(f"lockstep cpu:{n} reports replicas={j.get('replicas')}, global_batch_size="
                f"{j.get('global_batch_size')}; expected {n}, {gbs}")
            ls_fail = True
    except (OSError, ValueError, KeyError, TypeError) as e:
        err(f"no train_steps_per_second from lockstep cpu:{n}: {e}")
        ls_fail = True
    runs[f"lockstep_{n}"] = (f"lockstep, {n} replica{'s' if n > 1 else ''}", n, steps, sps)
ref = {}
try:
    with open(f"{tmp}/ref.out") as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    ref = json.loads(lines[-1])
except (OSError, ValueError, IndexError) as e:
    err(f"no result from bench/reference_distributed.py: {e}")
runs["tf_mirrored"] = ("TF MirroredStrategy, 2 logical CPUs", 2, ref_steps, ref.get("tf"))
runs["torch_ddp"] = ("torch DDP gloo, 2 processes", 2, ref_steps, ref.get("torch"))

ls1, ls2 = runs["lockstep_1"][3], runs["lockstep_2"][3]
refs = {k: runs[k][3] for k in ("tf_mirrored", "torch_ddp") if runs[k][3] is not None}
best = max(refs, key=refs.get) if refs else None
r_ref = ls2 / refs[best] if (ls2 is not None and best) else None
r_scale = ls2 / ls1 if (ls1 and ls2 is not None) else None
unavailable = [k for k in ("tf_mirrored", "torch_ddp") if runs[k][3] is None]

if as_json:
    out = {
        "global_batch_size": gbs, "lockstep_steps": steps, "reference_steps": ref_steps,
        "results": {k: {"replicas": r, "per_replica_batch": gbs // r, "steps": s,
                        "steps_per_second": v, "examples_per_second": None if v is None else v * gbs}
                    for k, (_, r, s, v) in runs.items()},
        "best_reference": best,
        "lockstep2_over_best_reference": r_ref,
        "goal_3x_met": None if r_ref is None else r_ref >= 3.0,
        "lockstep2_over_lockstep1": r_scale,
        "unavailable": unavailable,
        "lockstep_failed": ls_fail,
    }
    print(json.dumps(out))
else:
    print(f"flagship MLP, global batch {gbs}, lockstep {steps} steps, references {ref_steps} steps")
    print(f"  {'configuration':38s} {'repl':>4s} {'batch/repl':>10s} {'steps/s':>10s} {'examples/s':>11s}")
    for k, (label, r, s, v) in runs.items():
        fig = (("FAILED" if k.startswith("lockstep") else "unavailable") if v is None
               else f"{v:10.1f} {v * gbs:11.0f}")
        print(f"  {label:38s} {r:4d} {gbs // r:10d} {fig:>22s}")
    if r_ref is None:
        print(f"  {'lockstep(2) / best reference':38s} n/a")
    else:
        print(f"  {'lockstep(2) / best reference':38s} {r_ref:6.2f}x  (best: {best}; goal >= 3x: "
              f"{'met' if r_ref >= 3.0 else 'NOT met'})")
    print(f"  {'lockstep(2) / lockstep(1)':38s} " + ("n/a" if r_scale is None else f"{r_scale:6.2f}x"))
    for k in unavailable:
        print(f"  note: {runs[k][0]} unavailable (reason above on stderr)")
sys.exit(1 if ls_fail else 0)
PYEOF
