#!/usr/bin/env bash
# steps_per_execution.sh LOCKSTEP : `lockstep train --steps-per-execution N` (Keras'
# steps_per_execution) trains the weights of N = 1 (the same test loss and history, bit for bit,
# with steps per epoch not a multiple of N and two replicas), records N in --metrics-out and in
# a saved .keras file, and refuses a count that is not a positive integer, naming the flag.
set -uo pipefail
cli="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
expect() { timeout 300 "$here/expect.sh" "$@" || exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
run=(train --batch-size 8 --devices cpu:2 --verbose 0 --no-tensorboard --steps-per-epoch 6 --epochs 2)
"$cli" "${run[@]}" --logdir "$work/one" --metrics-out "$work/one.json" >/dev/null || fail "the N = 1 run failed"
"$cli" "${run[@]}" --steps-per-execution 4 --logdir "$work/four" --metrics-out "$work/four.json" \
  --save-model "$work/four.keras" >/dev/null || fail "the N = 4 run failed"
python3 - "$work" <<'PY' || exit 1
import json, sys, zipfile
w = sys.argv[1]
one, four = (json.load(open(f"{w}/{n}.json")) for n in ("one", "four"))
pick = lambda r: [r["test_loss"], r["test_accuracy"]] + [r["history"][k] for k in ("loss", "accuracy", "val_loss", "val_accuracy")]
if pick(one) != pick(four):
    sys.exit(f"FAIL: the losses differ with --steps-per-execution 4: {pick(four)} against {pick(one)}")
if (one["steps_per_execution"], four["steps_per_execution"]) != (1, 4):
    sys.exit("FAIL: --metrics-out does not record steps_per_execution")
config = json.loads(zipfile.ZipFile(f"{w}/four.keras").read("config.json"))
if config["compile_config"]["steps_per_execution"] != 4:
    sys.exit("FAIL: the .keras file's compile_config does not keep steps_per_execution 4")
print("ok: the same test loss, accuracy and history as N = 1; N recorded")
PY
expect 2 "--steps-per-execution: Value 0 not in range 1" "$cli" train --steps-per-execution 0
expect 2 "--steps-per-execution: Value two not in range 1" "$cli" train --steps-per-execution two
expect 2 "--backup-every-steps 6 must be a multiple of --steps-per-execution 4" \
  "$cli" train --steps-per-execution 4 --backup-every-steps 6
