#!/usr/bin/env bash
# phase_times.sh CLI WORK : LOCKSTEP_PHASE_TIMES=1 makes `lockstep train` print, at exit, one line
# per replica with its mean ms per step in each phase (non-negative, adding up to the total it
# prints); without it, nothing.
set -uo pipefail
cli="$1"; work="$2"
rm -rf "$work" && mkdir -p "$work"
flags=(train --devices cpu:2 --global-batch-size 64 --epochs 1 --steps-per-epoch 24 --verbose 0 --no-tensorboard)
out="$(LOCKSTEP_PHASE_TIMES=1 "$cli" "${flags[@]}" --logdir "$work/on" 2>&1)" || { echo "$out"; echo "FAIL: the run failed"; exit 1; }
echo "$out" | grep "phase times"
python3 - "$out" <<'PYEOF' || exit 1
import re, sys
lines = [l for l in sys.argv[1].splitlines() if "phase times" in l]
pat = re.compile(r"replica (\d+), ms per step over (\d+) steps: input ([\d.]+) forward ([\d.]+) backward ([\d.]+) "
                 r"exchange wait ([\d.]+) update ([\d.]+) \(total ([\d.]+)\)")
seen = set()
for l in lines:
    m = pat.search(l)
    if not m:
        sys.exit(f"FAIL: unexpected line: {l}")
    replica, steps, *v = m.groups()
    phases, total = [float(x) for x in v[:5]], float(v[5])
    if int(steps) != 14:  # 24 steps, the first 10 left out
        sys.exit(f"FAIL: replica {replica} counted {steps} steps, expected 14")
    if abs(sum(phases) - total) > 0.01 or phases[1] <= 0 or phases[2] <= 0:
        sys.exit(f"FAIL: phases {phases} do not add up to {total}, or forward/backward took no time")
    seen.add(int(replica))
if seen != {0, 1}:
    sys.exit(f"FAIL: lines for replicas {sorted(seen)}, expected 0 and 1")
print("ok: one line per replica, phases adding up to the total")
PYEOF
off="$("$cli" "${flags[@]}" --logdir "$work/off" 2>&1)" || { echo "$off"; echo "FAIL: the run without the switch failed"; exit 1; }
if grep -q "phase times" <<<"$off"; then echo "FAIL: phase times printed without LOCKSTEP_PHASE_TIMES"; exit 1; fi
echo "ok: nothing without the switch"
