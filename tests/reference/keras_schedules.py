#!/usr/bin/env python3
"""Compares lockstep's learning-rate schedules with Keras' own.

    .venv-ref/bin/python tests/reference/keras_schedules.py VALUES

VALUES holds schedules_driver's lines "NAME STEP VALUE". Each NAME is built here with
keras.optimizers.schedules and the same arguments; Keras computes in float32, so a value passes
within 2e-6 relative (1e-7 absolute). Exit 0 agree, 1 disagree, 2 bad input, 77 without Keras.
"""

import sys


def main() -> int:
    try:
        import keras
    except ImportError as e:
        print(f"keras_schedules: SKIP: {e}", file=sys.stderr)
        return 77
    s = keras.optimizers.schedules
    built = {
        "exponential": s.ExponentialDecay(0.1, 7, 0.5),
        "exponential_staircase": s.ExponentialDecay(0.1, 7, 0.5, staircase=True),
        "piecewise": s.PiecewiseConstantDecay([3, 5, 60], [3.0, 2.0, 1.0, 0.5]),
        "cosine_alpha": s.CosineDecay(0.2, 40, alpha=0.1),
        "cosine_warmup": s.CosineDecay(0.1, 100, warmup_target=1.0, warmup_steps=10),
        "polynomial_power2": s.PolynomialDecay(0.1, 10, 0.01, power=2.0),
        "polynomial_cycle": s.PolynomialDecay(0.1, 10, 0.01, power=0.5, cycle=True),
    }
    try:
        rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
        rows = [(n, int(st), float(v)) for n, st, v in rows]
    except (IndexError, OSError, ValueError) as e:
        print(f"keras_schedules: cannot read the values: {e}", file=sys.stderr)
        return 2
    bad = 0
    seen = set()
    for name, step, ours in rows:
        if name not in built:
            print(f"keras_schedules: unknown schedule {name}", file=sys.stderr)
            return 2
        seen.add(name)
        theirs = float(keras.ops.convert_to_numpy(built[name](step)))
        if abs(ours - theirs) > 2e-6 * abs(theirs) + 1e-7:
            bad += 1
            if bad <= 10:
                print(f"{name} step {step}: lockstep {ours!r}, Keras {theirs!r}")
    if seen != set(built):
        print(f"keras_schedules: missing {sorted(set(built) - seen)}", file=sys.stderr)
        return 2
    print(f"{len(rows)} values of {len(seen)} schedules: {'all agree' if not bad else f'{bad} disagree'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
