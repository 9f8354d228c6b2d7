#!/usr/bin/env bash
# expect.sh CODE REGEX CMD... : runs CMD, passes when it exits with CODE and its combined
# output matches the extended regex REGEX.
set -u
code="$1"; regex="$2"; shift 2
out="$("$@" 2>&1)"; rc=$?
if [[ $rc -ne $code ]]; then
  printf 'expected exit %s, got %s from: %s\n%s\n' "$code" "$rc" "$*" "$out"; exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  printf 'output of %s does not match /%s/:\n%s\n' "$*" "$regex" "$out"; exit 1
fi
echo "ok: exit $rc, output matches /$regex/"
