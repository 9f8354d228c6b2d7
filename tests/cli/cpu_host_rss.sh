#!/usr/bin/env bash
# cpu_host_rss.sh CLI WORK : on a host without a GPU lockstep pays nothing for CUDA (its backend
# is the plugin liblockstep_cuda.so, loaded only where a GPU is): `lockstep --help` peaks under
# 50 MiB of RSS and the README's `lockstep train` (the MNIST MLP, 5 epochs) under 150 MiB, as GNU
# time measures them. A limit users rely on, whatever the build.
set -uo pipefail
cli="$1"; work="$2"
rm -rf "$work" && mkdir -p "$work"
[[ -x /usr/bin/time ]] || { echo "FAIL: GNU time (/usr/bin/time) is missing; scripts/setup.sh installs it"; exit 1; }
if "$cli" devices 2>/dev/null | grep "^gpu:" | grep -vq "emulated"; then
  echo "skipped: a GPU is visible here; the bounds are for CPU-only hosts"
  exit 77
fi
# measure WHAT LIMIT_MIB CMD... : runs CMD under GNU time and checks its peak RSS ("Maximum
# resident set size") against the bound.
measure() {
  local what="$1" limit="$2"; shift 2
  local out="$work/$(tr -c 'a-z0-9' _ <<<"$what")"
  /usr/bin/time -v -o "$out.time" "$@" >"$out.log" 2>&1 || { cat "$out.log" "$out.time"; echo "FAIL: $what exited non-zero"; exit 1; }
  local kib; kib="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out.time")"
  [[ "$kib" =~ ^[0-9]+$ ]] || { cat "$out.time"; echo "FAIL: no peak RSS in GNU time's report"; exit 1; }
  if ((kib >= limit * 1024)); then
    echo "FAIL: $what peaked at $((kib / 1024)) MiB of RSS, over the $limit MiB bound"
    exit 1
  fi
  echo "ok: $what peaked at $((kib / 1024)) MiB of RSS (bound $limit MiB)"
  last_log="$out.log"
}
measure "lockstep --help" 50 "$cli" --help
measure "lockstep train (the README's MNIST MLP)" 150 "$cli" train --verbose 2 --logdir "$work/run"
grep -q "test_accuracy" "$last_log" || { cat "$last_log"; echo "FAIL: the train run reported no test accuracy"; exit 1; }
