#!/usr/bin/env bash
# char_gpt.sh LOCKSTEP CASE : the character model, `lockstep train --model gpt` and `lockstep
# generate` (issue 40, acceptance 2); each CASE is one ctest entry (cli.char_gpt.CASE).
#   learns     : on the default text (Debian's /usr/share/common-licenses) the validation loss ends
#                at least 1 nat per character below the text's unigram entropy; generate prints
#                the prompt and --length characters of the vocabulary, the same for the same --seed
#   bad_inputs : a missing, empty, binary, non-UTF-8 or too short --text, and generate's bad
#                prompt, model and flags, each refused with an error naming it
set -uo pipefail
cli="$1"; case="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
expect() { timeout 300 "$here/expect.sh" "$@" || exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
# generated VOCABULARY_JSON OUTPUT PROMPT N : OUTPUT is PROMPT, N characters of the vocabulary and a newline.
generated() {
  python3 - "$@" <<'PY' || exit 1
import json, sys
vocab, prompt, n = set(json.load(open(sys.argv[1]))["characters"]), sys.argv[3], int(sys.argv[4])
text = open(sys.argv[2], encoding="utf-8").read()
if not text.startswith(prompt) or not text.endswith("\n") or len(text) != len(prompt) + n + 1:
    sys.exit("FAIL: expected the prompt, %d characters and a newline, got %d characters: %r" % (n, len(text), text))
if not set(text[len(prompt):-1]) <= vocab:
    sys.exit("FAIL: characters outside the vocabulary: %r" % (set(text[len(prompt):-1]) - vocab))
PY
}

case "$case" in
learns)
  # 600 steps of a global batch of 32 windows of 64 characters (about 6 passes over the text):
  # the smallest run found to clear the bar with a margin (dim 64, 2 blocks, Adam 2e-3).
  timeout 600 "$cli" train --model gpt --epochs 3 --steps-per-epoch 200 --global-batch-size 32 --dim 64 --heads 4 \
    --depth 2 --learning-rate 2e-3 --verbose 2 --no-tensorboard --logdir "$work/run" --metrics-out "$work/m.json" ||
    fail "lockstep train --model gpt exited $?"
  python3 - "$work/m.json" <<'PY' || exit 1
import json, sys
m = json.load(open(sys.argv[1]))
h, loss = m["unigram_entropy"], m["test_loss"]
print("unigram entropy %.4f, validation loss %.4f nats per character: %.4f below" % (h, loss, h - loss))
sys.exit(0 if loss <= h - 1 else "FAIL: the validation loss is not 1 nat per character below the unigram entropy")
PY
  gen=(generate --model "$work/run" --prompt "This License " --length 150 --temperature 0.8)
  for run in 5:a 5:b 6:c; do "$cli" "${gen[@]}" --seed "${run%:*}" >"$work/gen-$run" || fail "generate exited $?"; done
  cat "$work/gen-5:a"
  cmp -s "$work/gen-5:a" "$work/gen-5:b" || fail "the same --seed gave two texts"
  ! cmp -s "$work/gen-5:a" "$work/gen-6:c" || fail "--seed 5 and --seed 6 gave the same text"
  generated "$work/run/model/vocabulary.json" "$work/gen-5:a" "This License " 150
  greedy="$("$cli" generate --model "$work/run/model" --prompt "GNU" --length 40 --temperature 0)" || exit 1
  [[ "$greedy" == "$("$cli" generate --model "$work/run/model" --prompt "GNU" --length 40 --temperature 0)" ]] ||
    fail "temperature 0 is not deterministic"
  ;;
bad_inputs)
  base=(train --model gpt --epochs 1 --steps-per-epoch 1 --dim 8 --heads 2 --depth 1 --verbose 0 --no-tensorboard)
  printf '' >"$work/empty.txt"
  printf 'ab\0cd%.0s' {1..100} >"$work/binary.bin"
  printf 'caf\xe9 au lait, encore du caf\xe9\n%.0s' {1..20} >"$work/latin1.txt"
  printf 'short text\n' >"$work/short.txt"
  expect 1 "text file '$work/missing.txt' does not exist" "$cli" "${base[@]}" --text "$work/missing.txt" --logdir "$work/r1"
  expect 2 "empty.txt' is empty" "$cli" "${base[@]}" --text "$work/empty.txt" --logdir "$work/r2"
  expect 2 "binary.bin' is not text: it holds a NUL byte at offset 2" "$cli" "${base[@]}" --text "$work/binary.bin" \
    --logdir "$work/r3"
  expect 2 "latin1.txt' is not UTF-8 text: byte 0xE9 at offset 3" "$cli" "${base[@]}" --text "$work/latin1.txt" \
    --logdir "$work/r4"
  expect 2 "short.txt' holds 11 characters: too few" "$cli" "${base[@]}" --text "$work/short.txt" --logdir "$work/r5"
  for r in r1 r2 r3 r4 r5; do [[ ! -e "$work/$r" ]] || fail "a refused run made its run directory $r"; done
  expect 2 "--text applies to --model gpt" "$cli" train --text "$work/short.txt"
  expect 2 "CharGPT: dim 10 must be a multiple of num_heads 4 \\(--dim sets dim, --heads sets num_heads" "$cli" train --model gpt --dim 10
  # A tiny model to generate from.
  for i in $(seq 40); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$work/fox.txt"
  "$cli" "${base[@]}" --text "$work/fox.txt" --sequence-length 16 --logdir "$work/fox" --save-model "$work/fox.keras" \
    >/dev/null || fail "training the tiny model exited $?"
  [[ -s "$work/fox.vocabulary.json" ]] || fail "--save-model FILE.keras wrote no FILE.vocabulary.json"
  "$cli" generate --model "$work/fox.keras" --prompt "the quick" --length 5 --seed 1 >"$work/fox.out" || exit 1
  generated "$work/fox.vocabulary.json" "$work/fox.out" "the quick" 5
  expect 2 "--prompt: character 'Q' \\(U\\+0051\\) at position 4 is not in the model's vocabulary" \
    "$cli" generate --model "$work/fox" --prompt "the Quick"
  expect 1 "no-such-run' does not exist" "$cli" generate --model "$work/no-such-run"
  rm "$work/fox/model/vocabulary.json"
  expect 1 "no vocabulary beside the model .*vocabulary.json does not exist" "$cli" generate --model "$work/fox"
  expect 2 "--temperature: Value -1 not in range" "$cli" generate --model "$work/fox.keras" --temperature -1
  expect 2 "--length: Value 0 not in range" "$cli" generate --model "$work/fox.keras" --length 0
  expect 2 "--seed.*must be an integer" "$cli" generate --model "$work/fox.keras" --seed -1
  ;;
*)
  echo "unknown case $case"; exit 2 ;;
esac
echo "PASS"
