#!/usr/bin/env bash
# phase_times.sh CLI WORK : LOCKSTEP_PHASE_TIMES=1 makes `lockstep train` print, at exit, one line
# per replica with its mean ms per step in each phase, and one for fit's loop (input wait, step,
# read, callbacks), each phase non-negative and adding up to the total it prints; on one device
# whose steps are replayed from a graph (an emulated GPU) the loop's line still comes; without the
# switch, nothing.
set -uo pipefail
cli="$1"; work="$2"
rm -rf "$work" && mkdir -p "$work"
flags=(train --global-batch-size 64 --epochs 1 --steps-per-epoch 24 --verbose 0 --no-tensorboard)
# check RUN_NAME EXPECTED_REPLICAS ENV... -- CLI_FLAGS...: runs the CLI and checks its phase lines.
check() {
  local name="$1" replicas="$2"; shift 2
  local envs=()
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  local out
  out="$(env LOCKSTEP_PHASE_TIMES=1 "${envs[@]}" "$cli" "${flags[@]}" "$@" --logdir "$work/$name" 2>&1)" ||
    { echo "$out"; echo "FAIL: $name: the run failed"; return 1; }
  echo "$out" | grep "phase times"
  python3 - "$out" "$replicas" "$name" <<'PYEOF'
import re, sys
out, want, name = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in out.splitlines() if "phase times" in l]
rep = re.compile(r"replica (\d+), ms per step over (\d+) steps: input ([\d.]+) forward ([\d.]+) backward ([\d.]+) "
                 r"exchange wait ([\d.]+) update ([\d.]+) \(total ([\d.]+)\)$")
loop = re.compile(r"fit loop, ms per step over (\d+) steps: input wait ([\d.]+) step ([\d.]+) read ([\d.]+) "
                  r"callbacks ([\d.]+) \(total ([\d.]+)\)$")
seen, loops = set(), 0
for l in lines:
    m, who = rep.search(l), None
    if m:
        who, steps, *v = m.groups()
        phases, total, busy = [float(x) for x in v[:5]], float(v[5]), (1, 2)  # forward, backward
        seen.add(int(who))
    else:
        m = loop.search(l)
        if not m:
            sys.exit(f"FAIL: {name}: unexpected line: {l}")
        steps, *v = m.groups()
        phases, total, busy = [float(x) for x in v[:4]], float(v[4]), (1,)  # step
        loops += 1
    if int(steps) != 14:  # 24 steps, the first 10 left out
        sys.exit(f"FAIL: {name}: {l!r} counted {steps} steps, expected 14")
    if abs(sum(phases) - total) > 0.01 or any(phases[i] <= 0 for i in busy):
        sys.exit(f"FAIL: {name}: phases {phases} do not add up to {total}, or a step's phase took no time")
expected = set(range(int(want)))
if seen != expected or loops != 1:
    sys.exit(f"FAIL: {name}: lines for replicas {sorted(seen)} and {loops} fit loop(s), "
             f"expected replicas {sorted(expected)} and one fit loop")
print(f"ok: {name}: one line per replica ({want}) and one for fit's loop, phases adding up to the total")
PYEOF
}
check cpu2 2 -- --devices cpu:2 || exit 1
# One emulated GPU: the step is captured once and replayed, so only the loop's line can say where
# the time goes (the replica phases run in the capture only).
check gpu0 0 LOCKSTEP_EMULATED_GPUS=1 -- --devices gpu:0 || exit 1
off="$("$cli" "${flags[@]}" --devices cpu:2 --logdir "$work/off" 2>&1)" || { echo "$off"; echo "FAIL: the run without the switch failed"; exit 1; }
if grep -q "phase times" <<<"$off"; then echo "FAIL: phase times printed without LOCKSTEP_PHASE_TIMES"; exit 1; fi
echo "ok: nothing without the switch"
