#!/usr/bin/env python3
"""Functional models of two inputs and two outputs in .keras files, both ways against real Keras
(TF backend, .venv-ref).

usage: keras_multi_io.py DIR KERAS_FILES_DRIVER

(a) Keras builds image + tab -> cls + reg with random weights, as dicts and as lists, compiled
    with per-output losses, loss_weights and metrics, and saves it: lockstep predicts each output
    as Keras does (relative 1e-4); lockstep's re-save loads back in Keras, predicts the same and
    keeps the compile config (losses, weights and metrics per output).
(b) lockstep trains such a model (dicts) and saves it: keras.saving.load_model reads it, predicts
    what lockstep does (relative 1e-4) and evaluates it under Keras' names (cls_loss, reg_mae, ...).
(d) Keras' weighted_metrics per output ({"cls": ["accuracy"], "reg": ["mae"]}, beside metrics
    {"cls": ["accuracy"]}) and one sample weight array per output: lockstep, reading Keras' file,
    evaluates to Keras' logs (names: cls_weighted_accuracy; metrics 1e-6, losses relative 1e-5),
    and its re-save keeps weighted_metrics as Keras wrote them.
(c) MultiHeadAttention's call keywords: Keras' mha(x, x, use_causal_mask=True) then
    mha(y, y, attention_mask=mask), the mask a second input: lockstep predicts Keras' outputs
    (relative 1e-4) and its re-save loads in Keras and predicts the same.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, np, keras  # noqa: E402

RTOL = 1e-4
N = 32


def data(seed):
    rng = np.random.RandomState(seed)
    image = rng.rand(N, 6, 6, 1).astype(np.float32)
    tab = rng.rand(N, 3).astype(np.float32)
    return image, tab, tab.argmax(axis=1).astype(np.int64), image.mean(axis=(1, 2, 3))[:, None] * 4


def keras_model(form):
    keras.utils.set_random_seed(7)
    image, tab = keras.Input((6, 6, 1), name="image"), keras.Input((3,), name="tab")
    h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([keras.layers.Flatten()(image), tab]))
    cls = keras.layers.Dense(3, activation="softmax", name="cls")(h)
    reg = keras.layers.Dense(1, name="reg")(h)
    if form == "dict":
        model = keras.Model({"image": image, "tab": tab}, {"cls": cls, "reg": reg}, name="keras_dicts")
        model.compile("adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                      loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": ["accuracy"], "reg": ["mae"]})
    else:
        model = keras.Model([image, tab], [cls, reg], name="keras_lists")
        model.compile("adam", loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.25],
                      metrics=[["accuracy"], ["mae"]])
    rng = np.random.RandomState(1)
    for w in model.weights:
        if w.path.endswith("bias"):
            w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def as_dict(outputs):
    return outputs if isinstance(outputs, dict) else {"cls": outputs[0], "reg": outputs[1]}


def keras_inputs(model, image, tab):
    return {"image": image, "tab": tab} if isinstance(model.input, dict) else [image, tab]


def lockstep_predict(driver, path, image, tab, d, tag, outputs=("cls", "reg")):
    xi, xt = os.path.join(d, f"{tag}_image.npy"), os.path.join(d, f"{tag}_tab.npy")
    np.save(xi, image)
    np.save(xt, tab)
    prefix = os.path.join(d, f"{tag}_pred_")
    r = run(driver, "multi-predict", path, xi, xt, prefix)
    if r.returncode != 0:
        check(False, f"{tag}: lockstep multi-predict: exit {r.returncode}: {r.stderr.strip()}")
        return None
    return {k: np.load(prefix + k + ".npy") for k in outputs}


ALIASES = {"mse": "mean_squared_error", "mae": "mean_absolute_error"}


def compile_config(path):
    """loss, loss_weights and metrics of a file's compile config, loss aliases spelt out."""
    c = json.loads(zipfile.ZipFile(path).read("config.json"))["compile_config"]
    loss = c["loss"]
    loss = {k: ALIASES.get(v, v) for k, v in loss.items()} if isinstance(loss, dict) else [ALIASES.get(v, v) for v in loss]
    return {"loss": loss, "loss_weights": c["loss_weights"], "metrics": c["metrics"]}


def agree(got, want, what):
    for k in ("cls", "reg"):
        e = rel(got[k], want[k]) if got[k].shape == want[k].shape else float("inf")
        check(e <= RTOL, f"{what}: output {k} agrees (rel {e:.2e})")


def keras_to_lockstep(form, d, driver):
    model = keras_model(form)
    image, tab, _, _ = data(0)
    want = as_dict(model.predict(keras_inputs(model, image, tab), verbose=0))
    path = os.path.join(d, f"{model.name}.keras")
    model.save(path)
    got = lockstep_predict(driver, path, image, tab, d, model.name)
    if got is not None:
        agree(got, want, f"(a) {form}: lockstep reads Keras' file")
    again = os.path.join(d, f"{model.name}_resaved.keras")
    back = kf.resave_and_load(driver, path, again, f"(a) {form}")
    if back is None:
        return
    agree(as_dict(back.predict(keras_inputs(back, image, tab), verbose=0)), want,
          f"(a) {form}: lockstep's re-save loads in Keras")
    mine, theirs = compile_config(again), compile_config(path)
    for key in ("loss", "loss_weights", "metrics"):
        check(mine[key] == theirs[key], f"(a) {form}: the re-save keeps {key}: {mine[key]} (Keras wrote {theirs[key]})")


def lockstep_to_keras(d, driver):
    image, tab, cls, reg = data(1)
    files = []
    for name, arr in (("image", image), ("tab", tab), ("cls", cls), ("reg", reg)):
        files.append(os.path.join(d, f"train_{name}.npy"))
        np.save(files[-1], arr)
    path = os.path.join(d, "lockstep_two_by_two.keras")
    r = run(driver, "multi-train", path, *files)
    if r.returncode != 0:
        check(False, f"(b) lockstep multi-train: {r.stderr.strip()}")
        return
    got = lockstep_predict(driver, path, image, tab, d, "lockstep_two_by_two")
    model = keras.saving.load_model(path)
    want = as_dict(model.predict({"image": image, "tab": tab}, verbose=0))
    if got is not None:
        agree(got, want, "(b) Keras reads lockstep's file")
    logs = model.evaluate({"image": image, "tab": tab}, {"cls": cls, "reg": reg}, verbose=0, return_dict=True)
    check(sorted(logs) == ["cls_accuracy", "cls_loss", "loss", "reg_loss", "reg_mae"],
          f"(b) Keras evaluates lockstep's compiled model under Keras' names: {sorted(logs)}")
    check(abs(logs["loss"] - (logs["cls_loss"] + 0.5 * logs["reg_loss"])) <= 1e-4 * logs["loss"],
          f"(b) loss is the weighted sum (weights kept): {logs}")


def weighted_per_output(d, driver):
    model = keras_model("dict")
    model.compile("adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": ["accuracy"]},
                  weighted_metrics={"cls": ["accuracy"], "reg": ["mae"]})
    image, tab, cls, reg = data(2)
    rng = np.random.RandomState(3)
    w_cls, w_reg = rng.uniform(0, 2, N).astype(np.float32), rng.uniform(0, 3, N).astype(np.float32)
    path = os.path.join(d, "keras_weighted.keras")
    model.save(path)
    want = model.evaluate({"image": image, "tab": tab}, {"cls": cls, "reg": reg},
                          sample_weight={"cls": w_cls, "reg": w_reg}, batch_size=8, verbose=0, return_dict=True)
    files = []
    for name, arr in (("image", image), ("tab", tab), ("cls", cls), ("reg", reg), ("w_cls", w_cls), ("w_reg", w_reg)):
        files.append(os.path.join(d, f"weighted_{name}.npy"))
        np.save(files[-1], arr)
    out = os.path.join(d, "weighted_logs.json")
    r = run(driver, "multi-evaluate-weighted", path, *files, out)
    if r.returncode != 0:
        check(False, f"(d) lockstep multi-evaluate-weighted: {r.stderr.strip()}")
        return
    with open(out) as f:
        got = json.load(f)
    check(set(got) == set(want) and "cls_weighted_accuracy" in want,
          f"(d) the logs' names: lockstep {sorted(got)}, Keras {sorted(want)}")
    for k in set(got) & set(want):
        ok = rel(got[k], want[k]) < 1e-5 if k.endswith("loss") else abs(got[k] - want[k]) < 1e-6
        check(ok, f"(d) {k}: lockstep {got[k]:.7g}, Keras {want[k]:.7g}")
    again = os.path.join(d, "keras_weighted_resaved.keras")
    if kf.resave_and_load(driver, path, again, "(d)") is not None:
        mine = json.loads(zipfile.ZipFile(again).read("config.json"))["compile_config"]["weighted_metrics"]
        theirs = json.loads(zipfile.ZipFile(path).read("config.json"))["compile_config"]["weighted_metrics"]
        check(mine == theirs, f"(d) the re-save keeps weighted_metrics: {mine} (Keras wrote {theirs})")


def attention_keywords(d, driver):
    keras.utils.set_random_seed(8)
    x, mask = keras.Input((5, 8), name="tokens"), keras.Input((5, 5), name="mask")
    y = keras.layers.MultiHeadAttention(2, 4, name="causal")(x, x, use_causal_mask=True)
    z = keras.layers.MultiHeadAttention(2, 3, name="out")(y, y, attention_mask=mask)
    model = keras.Model([x, mask], z, name="keras_attention_keywords")
    rng = np.random.RandomState(4)
    xs = rng.normal(0, 1, (8, 5, 8)).astype(np.float32)
    ms = (rng.rand(8, 5, 5) > 0.3).astype(np.float32)
    ms[:, :, 0] = 1  # every query attends to something
    want = {"out": model.predict([xs, ms], verbose=0)}
    path = os.path.join(d, f"{model.name}.keras")
    model.save(path)
    got = lockstep_predict(driver, path, xs, ms, d, model.name, outputs=("out",))
    if got is not None:
        e = rel(got["out"], want["out"]) if got["out"].shape == want["out"].shape else float("inf")
        check(e <= RTOL, f"(c) lockstep reads use_causal_mask and attention_mask (rel {e:.2e})")
    back = kf.resave_and_load(driver, path, os.path.join(d, f"{model.name}_resaved.keras"), "(c)")
    if back is not None:
        e = rel(back.predict([xs, ms], verbose=0), want["out"])
        check(e <= RTOL, f"(c) lockstep's re-save keeps the keywords in Keras (rel {e:.2e})")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    d, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    keras_to_lockstep("dict", d, driver)
    keras_to_lockstep("list", d, driver)
    lockstep_to_keras(d, driver)
    weighted_per_output(d, driver)
    attention_keywords(d, driver)
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
