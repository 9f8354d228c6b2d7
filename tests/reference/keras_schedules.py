#!/usr/bin/env python3
"""Compares lockstep's learning-rate schedules with Keras' own.

    .venv-ref/bin/python tests/reference/keras_schedules.py VALUES
    .venv-ref/bin/python tests/reference/keras_schedules.py --files SCHEDULES_DRIVER DIR

VALUES holds schedules_driver's lines "NAME STEP VALUE". Each NAME is built here with
keras.optimizers.schedules and the same arguments; Keras computes in float32, so a value passes
within 2e-6 relative (1e-7 absolute). Exit 0 agree, 1 disagree, 2 bad input, 77 without Keras.

--files: the schedules in .keras files, both ways. Keras saves a model compiled with Adam(NAME)
for each; `schedules_driver load` reads them and prints its optimizer's rates, which must be
Keras' own. `schedules_driver save DIR` saves lockstep's; keras.saving.load_model reads them and
its optimizer's schedule must give the same rates.
"""

import os
import subprocess
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
    if sys.argv[1] == "--files":
        return check_files(keras, built, sys.argv[2], sys.argv[3])
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


def compare(keras, built, rows, what):
    """rows: (NAME, STEP, VALUE); the number of values that differ from Keras' schedule NAME."""
    bad = 0
    for name, step, ours in rows:
        theirs = float(keras.ops.convert_to_numpy(built[name](step)))
        if abs(ours - theirs) > 2e-6 * abs(theirs) + 1e-7:
            bad += 1
            if bad <= 10:
                print(f"{what} {name} step {step}: lockstep {ours!r}, Keras {theirs!r}")
    return bad


def check_files(keras, built, driver, out):
    os.makedirs(out, exist_ok=True)
    # Keras -> lockstep.
    paths = []
    for name, schedule in built.items():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
        model.compile(optimizer=keras.optimizers.Adam(schedule), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        paths.append(os.path.join(out, f"keras_{name}.keras"))
        model.save(paths[-1])
    run = subprocess.run([driver, "load", *paths], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"schedules_driver load failed: {run.stderr}")
        return 1
    rows = []
    for line in run.stdout.splitlines():
        path, step, value = line.split()
        rows.append((os.path.basename(path)[len("keras_"):-len(".keras")], int(step), float(value)))
    bad = compare(keras, built, rows, "Keras file read by lockstep:")
    if {r[0] for r in rows} != set(built):
        print("schedules_driver load printed no rates for some files")
        return 1
    # lockstep -> Keras.
    run = subprocess.run([driver, "save", out], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"schedules_driver save failed: {run.stderr}")
        return 1
    for name in built:
        model = keras.saving.load_model(os.path.join(out, f"{name}.keras"))
        schedule = model.optimizer.learning_rate if callable(model.optimizer.learning_rate) else None
        schedule = getattr(model.optimizer, "_learning_rate", schedule)
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            print(f"lockstep's {name}.keras: Keras loaded no schedule ({schedule!r})")
            bad += 1
            continue
        rows = [(name, step, float(keras.ops.convert_to_numpy(schedule(step)))) for step in range(131)]
        bad += compare(keras, built, rows, "lockstep file read by Keras:")
    print(f"{len(built)} schedules in .keras files both ways: {'all agree' if not bad else f'{bad} disagree'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
