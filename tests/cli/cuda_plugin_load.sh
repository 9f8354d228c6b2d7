#!/usr/bin/env bash
# cuda_plugin_load.sh CLI FAKE_DRIVER_DIR WORK : the CUDA backend (the plugin liblockstep_cuda.so)
# is loaded where the driver sees a GPU -- here a stand-in driver that says one is there, which the
# CUDA runtime then cannot use (named with CUDA's reason) -- and a broken plugin, where a GPU is, is
# an error naming the file (status 2), never a crash.
set -uo pipefail
cli="$1"; driver="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work/bin"
out="$("$cli" devices 2>&1)" || { echo "$out"; echo "FAIL: lockstep devices failed"; exit 1; }
if grep "^gpu:" <<<"$out" | grep -vq emulated; then
  echo "(a GPU is visible here: the check of a host without one does not apply)"
else
  grep -q "CUDA backend not loaded" <<<"$out" || { echo "$out"; echo "FAIL: no GPU here, yet the backend was loaded"; exit 1; }
  echo "ok: without a GPU the CUDA backend is not loaded"
fi
out="$(LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" devices 2>&1)" \
  || { echo "$out"; echo "FAIL: lockstep devices failed with the plugin loaded"; exit 1; }
{ grep -q "^gpu:0" <<<"$out" && grep -q "^# CUDA driver" <<<"$out"; } \
  || { echo "$out"; echo "FAIL: the driver shows a GPU, but the plugin did not describe it"; exit 1; }
echo "ok: where the driver shows a GPU the plugin is loaded and answers"
# The stand-in driver's GPU is one the CUDA runtime cannot use: asking for it names CUDA's reason.
out="$(LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" train --devices gpu:0 --epochs 1 \
  --steps-per-epoch 1 2>&1)"
status=$?
{ [[ $status -eq 2 ]] && grep -q "the CUDA runtime cannot use them: cudaError" <<<"$out"; } \
  || { echo "$out"; echo "FAIL: a GPU the runtime cannot use gave status $status without CUDA's reason"; exit 1; }
echo "ok: a GPU the runtime cannot use is named with CUDA's reason"
# The program's own folder is the first place looked in: a broken plugin there is named.
cp "$cli" "$work/bin/lockstep" && echo "not a shared library" >"$work/bin/liblockstep_cuda.so"
out="$(LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/bin/lockstep" devices 2>&1)"
status=$?
[[ $status -eq 2 ]] || { echo "$out"; echo "FAIL: a broken plugin gave status $status, not 2"; exit 1; }
grep -q "$work/bin/liblockstep_cuda.so cannot be loaded" <<<"$out" \
  || { echo "$out"; echo "FAIL: the error does not name the broken plugin"; exit 1; }
echo "ok: a broken plugin is named: $out"
