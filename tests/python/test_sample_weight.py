"""Keras' sample_weight and class_weight through `import lockstep as tf`: fit and evaluate on arrays,
datasets of (x, y, sample_weight), validation_data's third array, a loss called with weights, and
the refusals Keras makes (or lockstep adds: weights that are not finite) by name."""
import numpy as np
import pytest

import lockstep as tf
from lockstep import keras
from lockstep.keras import layers


def data(n=40, features=5, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, features)).astype(np.float32), rng.integers(0, classes, n),
            rng.uniform(0.0, 2.0, n).astype(np.float32))


def model(seed=2):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input(shape=(5,)), layers.Dense(8, activation="relu"),
                          layers.Dense(3, activation="softmax")])
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def per_example_losses(m, x, y):
    p = m.predict(x, verbose=0)
    return -np.log(p[np.arange(len(y)), y].astype(np.float64))


def test_evaluate_weighs_each_loss_and_divides_by_the_examples():
    x, y, w = data()
    m = model()
    losses = per_example_losses(m, x, y)
    got = m.evaluate(x, y, sample_weight=w, batch_size=len(x), verbose=0, return_dict=True)
    # Keras 3 ("sum_over_batch_size"): sum(w * loss) / N, not / sum(w).
    assert got["loss"] == pytest.approx(np.sum(w * losses) / len(x), rel=1e-5)
    # Metrics are not weighted (only weighted_metrics are, in Keras 3).
    plain = m.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
    assert got["accuracy"] == plain["accuracy"]
    assert got["loss"] != plain["loss"]


def test_fit_with_all_ones_trains_as_without_and_weights_change_it():
    x, y, w = data()
    a, b, c = model(), model(), model()
    ha = a.fit(x, y, epochs=2, batch_size=8, verbose=0)
    hb = b.fit(x, y, sample_weight=np.ones(len(x)), epochs=2, batch_size=8, verbose=0)
    c.fit(x, y, sample_weight=w, epochs=2, batch_size=8, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    assert ha.history["loss"] == hb.history["loss"]
    assert any(not np.array_equal(wa, wc) for wa, wc in zip(a.get_weights(), c.get_weights()))


def test_a_dataset_of_triples_trains_as_the_argument():
    x, y, w = data()
    a, b = model(), model()
    a.fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8), epochs=2, verbose=0)
    b.fit(x, y, sample_weight=w, shuffle=False, batch_size=8, epochs=2, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    ds = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8)
    assert a.evaluate(ds, verbose=0)[0] == a.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0)[0]


def test_class_weight_is_each_examples_class_weight():
    x, y, _ = data()
    class_weight = {0: 0.5, 1: 2.0}  # class 2 weighs 1, as in Keras
    w = np.array([class_weight.get(int(c), 1.0) for c in y], np.float32)
    a, b, c = model(), model(), model()
    a.fit(x, y, class_weight=class_weight, shuffle=False, batch_size=8, epochs=2, verbose=0)
    b.fit(x, y, sample_weight=w, shuffle=False, batch_size=8, epochs=2, verbose=0)
    c.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), class_weight=class_weight, epochs=2, verbose=0)
    for wa, wb, wc in zip(a.get_weights(), b.get_weights(), c.get_weights()):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(wc, wb)


def test_validation_data_takes_its_sample_weights():
    x, y, w = data()
    m = model()
    h = m.fit(x[:32], y[:32], validation_data=(x[32:], y[32:], w[32:]), batch_size=8, epochs=1, verbose=0)
    assert h.history["val_loss"][0] == pytest.approx(
        m.evaluate(x[32:], y[32:], sample_weight=w[32:], batch_size=8, verbose=0)[0], rel=1e-6)


def test_a_loss_called_with_weights():
    y_true = np.array([0, 1, 2, 1])
    y_pred = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]], np.float32)
    w = np.array([2.0, 0.0, 1.0, 0.5], np.float32)
    loss = keras.losses.SparseCategoricalCrossentropy()
    each = -np.log(y_pred[np.arange(4), y_true])
    assert float(loss(y_true, y_pred, sample_weight=w)) == pytest.approx(np.sum(w * each) / 4, rel=1e-6)
    assert float(loss(y_true, y_pred, sample_weight=w[:, None])) == pytest.approx(np.sum(w * each) / 4, rel=1e-6)
    with pytest.raises(ValueError, match="sample_weight"):
        loss(y_true, y_pred, sample_weight=w[:3])


def test_bad_weights_are_value_errors_naming_them():
    x, y, w = data()
    m = model()
    with pytest.raises(ValueError, match="sample_weight has 39 weights but the data has 40 examples"):
        m.fit(x, y, sample_weight=w[:39], verbose=0)
    bad = w.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"sample_weight\[3\] is nan"):
        m.evaluate(x, y, sample_weight=bad, verbose=0)
    with pytest.raises(ValueError, match="You cannot `class_weight` and `sample_weight` at the same time"):
        m.fit(x, y, sample_weight=w, class_weight={0: 2.0}, verbose=0)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    with pytest.raises(ValueError, match="When providing `x` as a dataset, `sample_weight` should not be passed"):
        m.fit(ds, sample_weight=w, verbose=0)
    with pytest.raises(ValueError, match="When providing `x` as a dataset, `sample_weight` should not be passed"):
        m.evaluate(ds, sample_weight=w, verbose=0)
    with pytest.raises(ValueError, match="class_weight must be a dict"):
        m.fit(x, y, class_weight=[1.0, 2.0], verbose=0)


def test_compute_average_loss_weighs_the_losses():
    losses = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    w = np.array([0.5, 0.0, 2.0, 1.0], np.float32)
    got = tf.nn.compute_average_loss(tf.constant(losses), sample_weight=tf.constant(w), global_batch_size=8)
    assert float(got) == pytest.approx(float(np.sum(losses * w)) / 8, rel=1e-6)


def test_a_model_of_two_outputs_weighs_each_outputs_loss():
    x, y, w = data()
    reg = np.random.default_rng(3).normal(size=(len(x), 1)).astype(np.float32)
    keras.utils.set_random_seed(4)
    inp = keras.Input(shape=(5,))
    h = layers.Dense(8, activation="relu")(inp)
    m = keras.Model(inp, [layers.Dense(3, activation="softmax", name="cls")(h), layers.Dense(1, name="reg")(h)])
    m.compile(optimizer="adam", loss=["sparse_categorical_crossentropy", "mse"])
    plain = m.evaluate(x, [y, reg], batch_size=len(x), verbose=0, return_dict=True)
    weighted = m.evaluate(x, [y, reg], sample_weight=w, batch_size=len(x), verbose=0, return_dict=True)
    mse = (m.predict(x, verbose=0)[1] - reg)[:, 0].astype(np.float64) ** 2
    assert weighted["reg_loss"] == pytest.approx(np.sum(w * mse) / len(x), rel=1e-5)
    assert plain["reg_loss"] == pytest.approx(np.mean(mse), rel=1e-5)
    # One array per output (Keras' list in the outputs' order, or a dict by output name): each
    # weighs its own output's loss.
    w2 = np.random.default_rng(6).uniform(0.0, 3.0, len(x)).astype(np.float32)
    per_output = m.evaluate(x, [y, reg], sample_weight=[np.ones(len(x), np.float32), w2], batch_size=len(x),
                            verbose=0, return_dict=True)
    assert per_output["reg_loss"] == pytest.approx(np.sum(w2 * mse) / len(x), rel=1e-5)
    assert per_output["cls_loss"] == plain["cls_loss"]
    by_name = m.evaluate(x, [y, reg], sample_weight={"reg": w2, "cls": np.ones(len(x))}, batch_size=len(x),
                         verbose=0, return_dict=True)
    assert by_name == per_output
    # A dataset's elements carry them as (x, y, (w_cls, w_reg)).
    ds = tf.data.Dataset.from_tensor_slices((x, (y, reg), (np.ones(len(x), np.float32), w2))).batch(len(x))
    assert m.evaluate(ds, verbose=0, return_dict=True) == pytest.approx(per_output, rel=1e-6)
    a = m.fit(x, [y, reg], sample_weight=[w, w2], epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert np.isfinite(a.history["loss"]).all()
    with pytest.raises(ValueError, match="unknown nope"):
        m.fit(x, [y, reg], sample_weight={"cls": w, "reg": w, "nope": w}, verbose=0)
    with pytest.raises(ValueError, match="missing reg"):
        m.fit(x, [y, reg], sample_weight={"cls": w, "nope": w}, verbose=0)
    with pytest.raises(ValueError, match="expected 2 arrays"):
        m.evaluate(x, [y, reg], sample_weight=[w, w, w], verbose=0)
    with pytest.raises(ValueError, match=r"output 'reg'\): sample_weight must hold one weight per example"):
        m.evaluate(x, [y, reg], sample_weight=[w, np.ones((len(x), 3), np.float32)], verbose=0)
    with pytest.raises(ValueError, match="only supported for Models with a single output"):
        m.fit(x, [y, reg], class_weight={0: 2.0}, verbose=0)


def tagger(mask_zero, steps=6, vocab=7):
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input(shape=(steps,)), layers.Embedding(vocab, 8, mask_zero=mask_zero),
                          layers.Dense(8, activation="relu"), layers.Dense(vocab, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              weighted_metrics=["accuracy"])
    return m


def sequences(n=24, steps=6, vocab=7, seed=4):
    rng = np.random.default_rng(seed)
    x = np.zeros((n, steps), np.float32)
    for i, k in enumerate(rng.integers(1, steps + 1, n)):
        x[i, :k] = rng.integers(1, vocab, k)
    return x, rng.integers(0, vocab, (n, steps)), rng.uniform(0.0, 2.0, (n, steps)).astype(np.float32)


def test_a_sequence_output_weighs_each_step_by_its_mask_and_weight():
    x, y, w = sequences()
    m = tagger(mask_zero=True)
    p = m.predict(x, verbose=0).astype(np.float64)
    each = -np.log(np.take_along_axis(p, y[..., None], axis=-1)[..., 0])
    right = p.argmax(-1) == y
    kept = x != 0
    # Keras 3: the padded steps (Embedding(mask_zero=True)'s mask) are left out of the loss and the
    # metrics; weights per step weigh each step, the loss still divided by the kept steps.
    got = m.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
    assert got["loss"] == pytest.approx(each[kept].mean(), rel=1e-5)
    assert got["accuracy"] == pytest.approx(right[kept].mean(), abs=1e-6)
    got = m.evaluate(x, y, sample_weight=w, batch_size=len(x), verbose=0, return_dict=True)
    assert got["loss"] == pytest.approx(np.sum(w * kept * each) / kept.sum(), rel=1e-5)
    assert got["weighted_accuracy"] == pytest.approx(np.sum(w * kept * right) / np.sum(w * kept), abs=1e-6)
    h = m.fit(x, y, sample_weight=w, epochs=2, batch_size=8, verbose=0)
    assert np.isfinite(h.history["loss"]).all()


def test_a_loss_called_on_steps_with_weights_per_step():
    rng = np.random.default_rng(1)
    y_pred = rng.uniform(0.1, 1.0, (3, 4, 5)).astype(np.float32)
    y_pred /= y_pred.sum(-1, keepdims=True)
    y_true = rng.integers(0, 5, (3, 4))
    w = rng.uniform(0.0, 2.0, (3, 4)).astype(np.float32)
    each = -np.log(np.take_along_axis(y_pred, y_true[..., None], axis=-1)[..., 0])
    loss = keras.losses.SparseCategoricalCrossentropy()
    assert float(loss(y_true, y_pred, sample_weight=w)) == pytest.approx(np.sum(w * each) / 12, rel=1e-6)
    assert float(loss(y_true, y_pred, sample_weight=w[:, 0])) == pytest.approx(
        np.sum(w[:, :1] * each) / 12, rel=1e-6)
    none = keras.losses.SparseCategoricalCrossentropy(reduction="none")(y_true, y_pred)
    assert tuple(none.shape) == (3, 4)
    np.testing.assert_allclose(np.asarray(none), each, rtol=1e-6)
    with pytest.raises(ValueError, match=r"one per position of the loss \(3, 4\) \(shape \(3, 4\)\), got shape \(3, 3\)"):
        loss(y_true, y_pred, sample_weight=w[:, :3])


def test_weights_per_step_of_another_shape_are_value_errors():
    x, y, w = sequences()
    with pytest.raises(ValueError, match=r"one per position of the output \(shape \(24, 6\)\), got shape \(24, 5\)"):
        tagger(mask_zero=False).fit(x, y, sample_weight=w[:, :5], verbose=0)


def test_a_custom_loop_leaves_the_masked_steps_out_as_fit_does():
    # Keras 3: model(x) carries its output's mask (y_pred._keras_mask), which the loss and the
    # metrics called on it apply, so a custom loop computes fit's loss.
    x, y, w = sequences()
    m = tagger(mask_zero=True)
    got = m.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
    y_pred = m(x)
    kept = x != 0
    np.testing.assert_array_equal(np.asarray(y_pred._keras_mask) != 0, kept)
    loss = keras.losses.SparseCategoricalCrossentropy()
    assert float(loss(y, y_pred)) == pytest.approx(got["loss"], rel=1e-5)
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(y, y_pred)
    assert float(accuracy.result()) == pytest.approx(got["accuracy"], abs=1e-6)
    weighted = m.evaluate(x, y, sample_weight=w, batch_size=len(x), verbose=0, return_dict=True)
    assert float(loss(y, y_pred, sample_weight=w)) == pytest.approx(weighted["loss"], rel=1e-5)
    # The steps' losses themselves: the masked ones 0.
    none = np.asarray(keras.losses.SparseCategoricalCrossentropy(reduction="none")(y, y_pred))
    assert (none[~kept] == 0).all() and (none[kept] > 0).all()
    # A tensor without the mask (the predictions as an array) counts every step.
    p = np.asarray(y_pred).astype(np.float64)
    each = -np.log(np.take_along_axis(p, y[..., None], axis=-1)[..., 0])
    assert float(loss(y, np.asarray(y_pred))) == pytest.approx(each.mean(), rel=1e-5)
    assert float(loss(y, y_pred)) == pytest.approx(each[kept].mean(), rel=1e-5)
    # A model without a mask gives a tensor without one.
    assert getattr(tagger(mask_zero=False)(x), "_keras_mask", None) is None


def test_a_custom_training_step_on_masked_steps_ignores_the_padded_labels():
    # The padded steps' labels reach neither the loss nor its gradient.
    x, y, _ = sequences()
    m = tagger(mask_zero=True)
    loss = keras.losses.SparseCategoricalCrossentropy()

    def step(labels):
        with tf.GradientTape() as tape:
            value = loss(labels, m(x, training=True))
        return [float(value)] + [np.asarray(g) for g in tape.gradient(value, m.trainable_variables)]

    other = np.where(x != 0, y, (y + 1) % 7)
    before, after = step(y), step(other)
    assert before[0] == after[0]
    for a, b in zip(before[1:], after[1:]):
        np.testing.assert_array_equal(a, b)
