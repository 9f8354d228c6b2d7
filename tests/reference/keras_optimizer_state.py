#!/usr/bin/env python3
"""The optimizer's state in .keras files both ways, against real Keras 3 (TF backend, .venv-ref).

usage: keras_optimizer_state.py DIR KERAS_FILES_DRIVER

(a) Keras trains an Adam MLP 6 steps (batch 8, in order) and saves it; lockstep loads it (iterations,
    the rate, m and v) and trains the next 6; Keras trains its model the same 6: the weights and the
    optimizer's variables agree (relative 1e-4). With a fresh optimizer they would not: Adam's first
    steps move every weight by about the rate. The same with RMSprop(momentum, centered), whose
    slots Keras keeps slot by slot rather than per variable.
(b) lockstep trains 6 steps and saves; Keras loads the file without skipping its optimizer (no
    "Skipping variable loading" warning), with iterations 6, and trains 6 more; lockstep's own
    continuation from the same file agrees with it (1e-4).
(c) under mixed_float16, where both wrap Adam in a LossScaleOptimizer (whose skipped steps, float16's
    overflows, need not fall alike in the two): Keras' file, loaded and saved again by lockstep, loads
    in Keras with every optimizer variable as Keras saved it (step_counter, dynamic_scale, iterations,
    slots: exactly); lockstep's file loads in Keras with lockstep's count, scale and counter.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import subprocess
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
try:
    import numpy as np
    import keras
except ImportError as e:  # no reference environment: skip, do not fail
    print(f"SKIP: {e}")
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30)) if b.size else 0.0


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def data(d):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=48).astype(np.int64)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    return x, y


def fit_six(model, x, y):
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)


def keras_model(optimizer=None):
    keras.utils.set_random_seed(5)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer=optimizer or keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    return m


def load_without_skipping(path, what):
    """keras.saving.load_model, checking that Keras loaded the optimizer's variables (it warns where it skips)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.saving.load_model(path)
    skipped = [str(w.message) for w in caught if "Skipping variable loading" in str(w.message)]
    check(not skipped, f"{what}: Keras loads the optimizer's variables{': ' + skipped[0] if skipped else ''}")
    return model


def optimizer_values(model):
    return [np.asarray(v.numpy()) for v in model.optimizer.variables]


def compare(got, want, what, rtol):
    gw, ww = got.get_weights(), want.get_weights()
    worst = max(rel(g, w) for g, w in zip(gw, ww))
    check(len(gw) == len(ww) and worst <= rtol, f"{what}: weights agree (worst relative {worst:.2e} <= {rtol})")
    go, wo = optimizer_values(got), optimizer_values(want)
    if len(go) != len(wo):
        check(False, f"{what}: {len(go)} optimizer variables, Keras has {len(wo)}")
        return
    worst = max(rel(g, w) for g, w in zip(go, wo))
    ints = [(g, w) for g, w in zip(go, wo) if np.issubdtype(w.dtype, np.integer)]
    check(all(int(g) == int(w) for g, w in ints), f"{what}: iterations (and step_counter) equal: "
          f"{[int(g) for g, _ in ints]} vs {[int(w) for _, w in ints]}")
    check(worst <= rtol, f"{what}: {len(go)} optimizer variables agree (worst relative {worst:.2e} <= {rtol})")


def keras_to_lockstep(d, driver, x, y, tag="float32", optimizer=None):
    extra, rtol = [], 1e-4
    model = keras_model(optimizer)
    fit_six(model, x, y)
    path, out = os.path.join(d, f"keras_{tag}.keras"), os.path.join(d, f"keras_{tag}_continued.keras")
    model.save(path)
    r = run(driver, "optimizer-continue", path, os.path.join(d, "x.npy"), os.path.join(d, "y.npy"), out, *extra)
    if r.returncode != 0:
        check(False, f"(a) {tag}: lockstep continues Keras' file: {r.stderr.strip()}")
        return
    check("WARNING" not in r.stderr, f"(a) {tag}: lockstep loads Keras' optimizer without a warning {r.stderr.strip()}")
    fit_six(model, x, y)
    compare(load_without_skipping(out, f"(a) {tag}"), model, f"(a) {tag}: lockstep's 6 more steps vs Keras'", rtol)


def lockstep_to_keras(d, driver, x, y):
    tag, extra, rtol = "float32", [], 1e-4
    path, out = os.path.join(d, f"lockstep_{tag}.keras"), os.path.join(d, f"lockstep_{tag}_continued.keras")
    xs, ys = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    r = run(driver, "optimizer-train", path, xs, ys, *extra)
    if r.returncode != 0:
        check(False, f"(b) {tag}: lockstep trains and saves: {r.stderr.strip()}")
        return
    model = load_without_skipping(path, f"(b) {tag}")
    check(int(model.optimizer.iterations.numpy()) == 6, f"(b) {tag}: Keras reads iterations "
          f"{int(model.optimizer.iterations.numpy())} (6)")
    fit_six(model, x, y)
    r = run(driver, "optimizer-continue", path, xs, ys, out, *extra)
    if r.returncode != 0:
        check(False, f"(b) {tag}: lockstep continues its own file: {r.stderr.strip()}")
        return
    compare(load_without_skipping(out, f"(b) {tag} continued"), model, f"(b) {tag}: Keras' 6 more steps vs lockstep's",
            rtol)


def h5_optimizer_vars(path):
    """optimizer/vars/0.. of a .keras file's weights, as numpy values."""
    import io
    import zipfile

    import h5py
    with zipfile.ZipFile(path) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
        group = f["optimizer/vars"]
        return [np.asarray(group[str(i)]) for i in range(len(group))]


def mixed_both_ways(d, driver, x, y):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras_model()
    fit_six(model, x, y)
    path, again = os.path.join(d, "keras_mixed.keras"), os.path.join(d, "keras_mixed_resaved.keras")
    model.save(path)
    r = run(driver, "optimizer-resave", path, again, "--mixed")
    if r.returncode != 0 or "WARNING" in r.stderr:
        check(False, f"(c) lockstep loads and saves Keras' mixed_float16 file: {r.stderr.strip()}")
    else:
        want, got = optimizer_values(model), optimizer_values(load_without_skipping(again, "(c) lockstep's re-save"))
        same = len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
        check(same, f"(c) Keras' LossScaleOptimizer state ({len(want)} variables: step_counter "
              f"{int(want[2])}, dynamic_scale {float(want[3])}, iterations {int(want[4])}) comes back from "
              f"lockstep's re-save exactly")
    path = os.path.join(d, "lockstep_mixed.keras")
    r = run(driver, "optimizer-train", path, os.path.join(d, "x.npy"), os.path.join(d, "y.npy"), "--mixed")
    if r.returncode != 0:
        check(False, f"(c) lockstep trains and saves under mixed_float16: {r.stderr.strip()}")
    else:
        saved = h5_optimizer_vars(path)
        loaded = load_without_skipping(path, "(c) lockstep's mixed_float16 file")
        opt = loaded.optimizer
        check(isinstance(opt, keras.optimizers.LossScaleOptimizer), f"(c) Keras' optimizer is {type(opt).__name__}")
        got = (int(opt.iterations.numpy()), int(opt.step_counter.numpy()), float(opt.dynamic_scale.numpy()))
        want = (int(saved[4]), int(saved[2]), float(saved[3]))
        check(got == want and got[0] + got[1] > 0, f"(c) Keras reads lockstep's iterations, step_counter and "
              f"dynamic_scale {got} ({want})")
    keras.mixed_precision.set_global_policy("float32")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    d, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    x, y = data(d)
    keras_to_lockstep(d, driver, x, y)
    # RMSprop keeps its slots slot by slot (every velocity, then every momentum, then every average
    # gradient), where Adam interleaves them per variable: lockstep must read Keras' order.
    keras_to_lockstep(d, driver, x, y, "rmsprop", keras.optimizers.RMSprop(1e-2, momentum=0.5, centered=True))
    lockstep_to_keras(d, driver, x, y)
    mixed_both_ways(d, driver, x, y)
    print(f"{len(failures)} failed" if failures else "all agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
