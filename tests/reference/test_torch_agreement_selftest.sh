#!/usr/bin/env bash
# Self-test of tests/reference/torch_agreement.py without the C++ side:
#   unperturbed fixture -> exit 0; perturbed by 1e-2 -> exit 1; missing file -> exit 2;
#   malformed file (wrong dtype) -> exit 2.
# Needs /usr/bin/python3 with torch + numpy (Debian python3-torch, python3-numpy).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${LOCKSTEP_REF_PYTHON:-/usr/bin/python3}"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
expect() {  # expect NAME WANT_RC CMD...
  local name="$1" want="$2"
  shift 2
  "$@" >"$tmp/out.txt" 2>&1
  local rc=$?
  if [[ $rc -eq $want ]]; then
    echo "ok    $name (exit $rc)"
    passed=$((passed + 1))
  else
    echo "FAIL  $name: exit $rc, expected $want; output:"
    sed 's/^/      /' "$tmp/out.txt"
    failed=$((failed + 1))
  fi
}

# Small sizes keep it quick; one run at the flagship sizes checks the real shapes.
"$PY" "$here/make_agreement_fixture.py" "$tmp/good" --steps 30 --batch 32 --in 784 --hidden 128 --classes 10 >/dev/null
"$PY" "$here/make_agreement_fixture.py" "$tmp/bad" --steps 30 --batch 32 --perturb 1e-2 >/dev/null
"$PY" "$here/make_agreement_fixture.py" "$tmp/clip" --steps 10 --batch 16 --in 20 --hidden 8 --classes 5 \
  --loss clipped-probs >/dev/null

"$PY" "$here/make_agreement_fixture.py" "$tmp/sat" --steps 30 --batch 32 --init-scale 6 >/dev/null

expect "unperturbed fixture agrees" 0 "$PY" "$here/torch_agreement.py" "$tmp/good"
expect "saturated fixture agrees" 0 "$PY" "$here/torch_agreement.py" "$tmp/sat"
expect "saturated fixture disagrees under the other loss mode" 1 "$PY" "$here/torch_agreement.py" "$tmp/sat" --loss clipped-probs
expect "perturbed by 1e-2 disagrees" 1 "$PY" "$here/torch_agreement.py" "$tmp/bad"
expect "perturbed by 1e-2 agrees at rtol 5e-2" 0 "$PY" "$here/torch_agreement.py" "$tmp/bad" --rtol 5e-2
expect "clipped-probs fixture agrees in its mode" 0 "$PY" "$here/torch_agreement.py" "$tmp/clip" --loss clipped-probs

cp -r "$tmp/good" "$tmp/missing" && rm "$tmp/missing/lockstep_w1.npy"
expect "missing lockstep_w1.npy -> exit 2" 2 "$PY" "$here/torch_agreement.py" "$tmp/missing"
if ! grep -q "lockstep_w1.npy" "$tmp/out.txt"; then
  echo "FAIL  missing-file message does not name lockstep_w1.npy"; failed=$((failed + 1))
fi

cp -r "$tmp/good" "$tmp/dtype" && "$PY" -c "import numpy as np,sys; np.save(sys.argv[1], np.load(sys.argv[1]).astype(np.float64))" "$tmp/dtype/b0.npy"
expect "float64 b0.npy -> exit 2" 2 "$PY" "$here/torch_agreement.py" "$tmp/dtype"

cp -r "$tmp/good" "$tmp/shape" && "$PY" -c "import numpy as np,sys; np.save(sys.argv[1], np.zeros((29,), np.float32))" "$tmp/shape/lockstep_loss.npy"
expect "wrong-length lockstep_loss.npy -> exit 2" 2 "$PY" "$here/torch_agreement.py" "$tmp/shape"

echo "garbage" >"$tmp/good/../garbage.npy"
cp -r "$tmp/good" "$tmp/corrupt" && cp "$tmp/garbage.npy" "$tmp/corrupt/x.npy"
expect "corrupt x.npy -> exit 2" 2 "$PY" "$here/torch_agreement.py" "$tmp/corrupt"

# When the reference venv (tests/reference/ref_python.sh: $LOCKSTEP_PY_VENV or .venv-ref) has
# TensorFlow, check the reference itself against real Keras.
VENV_PY="$("$here/ref_python.sh" --path 2>/dev/null || true)"
if [[ -n "$VENV_PY" ]] && "$VENV_PY" -c "import tensorflow" >/dev/null 2>&1; then
  expect "Keras agrees with the reference (normal)" 0 "$VENV_PY" "$here/keras_crosscheck.py" "$tmp/good"
  expect "Keras agrees with the reference (saturated)" 0 "$VENV_PY" "$here/keras_crosscheck.py" "$tmp/sat"
else
  echo "skip  Keras cross-check (no tensorflow in the reference venv: $("$here/ref_python.sh" --path 2>&1 || true))"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
