#!/usr/bin/env bash
# Compares lockstep's training throughput on its two transformers with PyTorch and TF/Keras, on
# this machine, at the same global batch and thread count (issue 40's acceptance 5): the Vision
# Transformer on MNIST (lockstep train --model vit) and the causal character model
# (--model gpt) on the text of /usr/share/common-licenses; bench/reference_transformer.py
# describes both models (the shapes of applications::ViT and applications::CharGPT).
#
#   bench/compare_transformer.sh [-m vit|gpt|both] [-t THREADS] [-n STEPS] [-b BATCH] [-r ROUNDS]
#     (defaults: both, 2 threads, 200 steps, batch 128 for vit and 64 for gpt, 3 rounds)
#   env: LOCKSTEP_BIN (default build/bin/lockstep), REF_PYTHON (as bench/compare_mlp.sh)
#
# Runs one after another (never concurrently), ROUNDS times in turn, for each model:
#   lockstep, one device:  LOCKSTEP_CPU_THREADS=T lockstep train --model M --devices cpu:1 ...
#   lockstep, T replicas:  lockstep train --model M --devices cpu:T ... (one core each)
#   torch, tf:             bench/reference_transformer.py --model M --threads T ... --json
#                          (TF: its default threads and intra-op = T / inter-op = 1, the faster)
# and prints each one's median steps/s over the rounds, then lockstep's best configuration of a
# round over torch, over tf and over the faster of the two in that round: the median of the
# per-round ratios with their range. Interleaved rounds give each the same share of a shared
# VM's slow and fast minutes. Model sizes are passed explicitly so both sides train the same.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/bench/lib.sh"
models="vit gpt" threads=2 steps=200 batch="" rounds=3
while getopts "m:t:n:b:r:h" opt; do
  case "$opt" in
    m) [[ "$OPTARG" == both ]] && models="vit gpt" || models="$OPTARG" ;;
    t) threads="$OPTARG" ;;
    n) steps="$OPTARG" ;;
    b) batch="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    *) sed -n '8,10p' "$0"; exit 2 ;;
  esac
done
[[ "$models" == "vit gpt" || "$models" == vit || "$models" == gpt ]] ||
  { echo "compare_transformer: -m must be vit, gpt or both, got '$models'" >&2; exit 2; }
positive_ints "$threads" "$steps" "$rounds" ${batch:+"$batch"}
(( steps >= 20 )) || { echo "compare_transformer: -n must be at least 20 steps, got $steps" >&2; exit 2; }
bench_bin lockstep LOCKSTEP_BIN lockstep
py="$(reference_python "$repo")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
openblas_check --install  # torch's best configuration (bench/lib.sh): installed as root, else a warning
limit_library_threads "$threads"

# The character model's text, written once so that lockstep and the references learn the same
# characters: the files of /usr/share/common-licenses in name order, each once.
"$py" - "$repo/bench" "$tmp/text.txt" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import reference_transformer as r
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(r.read_text(None))
PYEOF

# Each model's sizes (transformer_arch.md), as lockstep's flags and as the reference's.
lockstep_sizes() {
  case "$1" in
    vit) echo "--patch 4 --dim 64 --heads 4 --depth 4 --mlp 128" ;;
    gpt) echo "--text $tmp/text.txt --sequence-length 64 --dim 128 --heads 4 --depth 2" ;;
  esac
}
reference_sizes() {
  case "$1" in
    vit) echo "--patch 4 --dim 64 --heads 4 --depth 4 --mlp 128" ;;
    gpt) echo "--text $tmp/text.txt --seq 64 --dim 128 --heads 4 --depth 2" ;;
  esac
}
batch_of() { if [[ -n "$batch" ]]; then echo "$batch"; elif [[ "$1" == vit ]]; then echo 128; else echo 64; fi; }

run_lockstep() {  # model, name, devices, extra env
  local model="$1" name="$2" devices="$3" b
  b="$(batch_of "$model")"
  echo "== round $round: lockstep $model ${name} ($devices, $steps steps, global batch $b)" >&2
  # shellcheck disable=SC2046  # the sizes are words
  if ! env ${4:+"$4"} "$lockstep" train --model "$model" $(lockstep_sizes "$model") --devices "$devices" --epochs 1 \
      --steps-per-epoch "$steps" --global-batch-size "$b" --logdir "$tmp/$model.$name.$round" --no-tensorboard \
      --verbose 0 --metrics-out "$tmp/$model.$name.$round.json" >"$tmp/$model.$name.$round.log" 2>&1; then
    echo "compare_transformer: lockstep $model $name failed; its last output:" >&2
    tail -n 20 "$tmp/$model.$name.$round.log" >&2
  fi
}
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat 2>/dev/null || echo 0; }
steal0="$(steal_ticks)" start="$(date +%s)"
for ((round = 1; round <= rounds; round++)); do
  for model in $models; do
    run_lockstep "$model" one_device cpu:1 "LOCKSTEP_CPU_THREADS=$threads"
    run_lockstep "$model" replicas "cpu:$threads" ""
    echo "== round $round: $model in PyTorch and TF/Keras ($py)" >&2
    # shellcheck disable=SC2046
    "$py" "$repo/bench/reference_transformer.py" --model "$model" --framework both --threads "$threads" \
      --steps "$steps" --batch "$(batch_of "$model")" $(reference_sizes "$model") --json \
      >"$tmp/$model.ref.$round.out" || true
  done
done

steal_s=$(( ($(steal_ticks) - steal0) / $(getconf CLK_TCK) )) elapsed_s=$(( $(date +%s) - start ))
"$py" - "$tmp" "$threads" "$steps" "$rounds" "$steal_s" "$elapsed_s" "$models" "$(batch_of vit)" "$(batch_of gpt)" "$repo/bench" <<'PYEOF'
import json, sys
tmp, threads, steps, rounds, steal_s, elapsed_s, models, vit_batch, gpt_batch, bench = sys.argv[1:11]
sys.path.insert(0, bench)
import rounds as summary
rounds = int(rounds)
title = {"vit": f"ViT on MNIST (patch 4, dim 64, 4 heads, depth 4, mlp 128), global batch {vit_batch}",
         "gpt": f"character GPT (seq 64, dim 128, 4 heads, depth 2), global batch {gpt_batch}"}
print(f"{steps} steps, {threads} thread(s), {rounds} interleaved round(s); "
      f"steal (time the VM's host took): {steal_s} s over the run's {elapsed_s} s")

ok = True
for model in models.split():
    per = {k: [None] * rounds for k in ("lockstep_one_device", "lockstep_replicas", "torch", "tf")}
    for r in range(rounds):
        for name in ("one_device", "replicas"):
            try:
                with open(f"{tmp}/{model}.{name}.{r + 1}.json") as f:
                    per[f"lockstep_{name}"][r] = float(json.load(f)["train_steps_per_second"])
            except (OSError, ValueError, KeyError) as e:
                print(f"compare_transformer: {model} round {r + 1}: no steps/s from lockstep {name}: {e}", file=sys.stderr)
        try:
            with open(f"{tmp}/{model}.ref.{r + 1}.out") as f:
                ref = json.loads([l for l in f.read().splitlines() if l.strip()][-1])
            for fw in ("torch", "tf"):
                if ref.get(fw) is not None:
                    per[fw][r] = float(ref[fw])
        except (OSError, ValueError, IndexError) as e:
            print(f"compare_transformer: {model} round {r + 1}: no result from reference_transformer.py: {e}",
                  file=sys.stderr)
    print(title[model])
    ok &= summary.report(per, mine=["lockstep_one_device", "lockstep_replicas"], refs=["torch", "tf"])
sys.exit(0 if ok else 1)
PYEOF
