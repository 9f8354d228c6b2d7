#!/usr/bin/env bash
# model_flags.sh LOCKSTEP : a model-specific flag given for a model it does not apply to is refused
# naming the flag and its models (no silent difference, given even at its default value), and a
# transformer size the model refuses is found before a run directory is claimed: no runs/ folder
# is left behind in the working directory.
set -uo pipefail
cli="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
expect() { timeout 120 "$here/expect.sh" "$@" || exit 1; }
base=(train --devices cpu:1 --epochs 1 --steps-per-epoch 1 --verbose 0 --no-tensorboard)
expect 2 "--patch applies to --model vit, not --model mlp" "$cli" "${base[@]}" --patch 4
expect 2 "--hidden applies to --model mlp, not --model cnn" "$cli" "${base[@]}" --model cnn --hidden 128
expect 2 "--dim applies to --model vit or gpt, not --model resnet20" "$cli" "${base[@]}" --model resnet20 --dim 32
expect 2 "--dropout applies to --model mlp, cnn or vit, not --model gpt" "$cli" "${base[@]}" --model gpt --dropout 0.1
expect 2 "--sequence-length applies to --model gpt, not --model vit" "$cli" "${base[@]}" --model vit --sequence-length 8
expect 2 "--dataset applies to --model mlp, cnn, resnet20, vit or FILE.keras, not --model gpt" \
  "$cli" "${base[@]}" --model gpt --dataset mnist
expect 2 "--activation applies to --model mlp, not --model net.keras" "$cli" "${base[@]}" --model net.keras --activation tanh
expect 2 "ViT: patch_size 5 must divide the image's height and width, \(28, 28, 1\) \(--patch sets patch_size" \
  "$cli" "${base[@]}" --model vit --patch 5
expect 2 "ViT: dim 30 must be a positive multiple of num_heads 4 \(.*--dim sets dim, --heads sets num_heads" \
  "$cli" "${base[@]}" --model vit --dim 30
[[ ! -e runs ]] || fail "a refused run left $(ls -R runs) behind"
# A flag of the model it is given with still applies.
"$cli" "${base[@]}" --hidden 16 --activation tanh --logdir "$work/ok" >/dev/null || fail "--model mlp --hidden 16 exited $?"
echo "ok: model flags"
