"""compile(metrics=[...]) by Keras' names and classes: categorical_accuracy on one-hot targets ("accuracy"
with categorical_crossentropy picks it, as Keras), mse beside mae, their values against NumPy on one
replica and on two, and what lockstep lacks refused by name."""
import numpy as np
import pytest

import lockstep as tf

keras = tf.keras
CLASSES = 5


def classification(n=96):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=n)
    return x, np.eye(CLASSES, dtype=np.float32)[labels], labels


def classifier(metrics, strategy=None):
    keras.utils.set_random_seed(11)
    with (strategy or tf.distribute.get_strategy()).scope():
        m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(CLASSES, activation="softmax")])
        m.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=metrics)
    return m


def top_class_matches(m, x, one_hot):
    return float(np.mean(np.argmax(m.predict(x, verbose=0), -1) == np.argmax(one_hot, -1)))


@pytest.mark.parametrize("devices", [None, ["cpu:0", "cpu:1"]])
def test_categorical_accuracy_by_name_and_class_is_the_share_of_rows_whose_top_class_is_the_targets(devices):
    x, one_hot, _ = classification()
    strategy = tf.distribute.MirroredStrategy(devices) if devices else None
    m = classifier(["accuracy", "categorical_accuracy", keras.metrics.CategoricalAccuracy(name="cat")], strategy)
    logs = m.evaluate(x, one_hot, batch_size=32, verbose=0, return_dict=True)
    expected = top_class_matches(m, x, one_hot)
    assert 0 < expected < 1
    assert logs["accuracy"] == pytest.approx(expected)  # Keras' "accuracy" of one-hot targets
    assert logs["categorical_accuracy"] == pytest.approx(expected)
    assert logs["cat"] == pytest.approx(expected)
    h = m.fit(x, one_hot, batch_size=32, epochs=1, shuffle=False, verbose=0)
    assert {"loss", "accuracy", "categorical_accuracy", "cat"} <= set(h.history)


def test_the_categorical_accuracy_object_alone_counts_matching_top_classes():
    metric = keras.metrics.CategoricalAccuracy()
    metric.update_state(np.eye(3, dtype=np.float32)[[0, 1, 2]], np.array([[0.8, 0.1, 0.1], [0.6, 0.3, 0.1],
                                                                          [0.1, 0.2, 0.7]], np.float32))
    assert metric.name == "categorical_accuracy" and float(metric.result()) == pytest.approx(2 / 3)
    metric.update_state(np.eye(3, dtype=np.float32)[[1]], np.array([[0.2, 0.5, 0.3]], np.float32))
    assert float(metric.result()) == pytest.approx(3 / 4)


def test_categorical_accuracy_of_integer_labels_is_refused_by_name():
    metric = keras.metrics.CategoricalAccuracy()
    with pytest.raises(ValueError, match=r"categorical_accuracy: y_true \(3, 1\) must be one-hot rows.*sparse_categorical"):
        metric.update_state(np.array([[0], [1], [2]], np.float32), np.eye(3, dtype=np.float32))


def test_mse_and_mae_by_name_and_class_are_numpys():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = rng.normal(size=(64, 2)).astype(np.float32)
    keras.utils.set_random_seed(2)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss="mae", metrics=["mse", "mae", keras.metrics.MeanSquaredError(),
                                                    keras.metrics.MeanAbsoluteError()])
    logs = m.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    error = m.predict(x, verbose=0) - y
    mse, mae = float(np.mean(error ** 2)), float(np.mean(np.abs(error)))
    assert logs["mse"] == pytest.approx(mse, rel=1e-5) and logs["mean_squared_error"] == pytest.approx(mse, rel=1e-5)
    assert logs["mae"] == pytest.approx(mae, rel=1e-5) and logs["mean_absolute_error"] == pytest.approx(mae, rel=1e-5)
    assert logs["loss"] == pytest.approx(mae, rel=1e-5)


def test_metrics_lockstep_lacks_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown metric 'f1_score': lockstep has acc, accuracy, binary_accuracy"):
        classifier(["f1_score"])
    with pytest.raises(AttributeError, match="tf.keras.metrics.AUC"):
        keras.metrics.AUC()


# Keras 3's top-k and binary accuracies: the classes on their docs' examples, and ties as Keras'
# in_top_k counts them (a target tied with the k-th score is in; checked against Keras 3.15.1).
def test_the_top_k_classes_count_a_target_tied_with_the_kth_score_as_in():
    scores = np.array([[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]], np.float32)
    top1 = keras.metrics.TopKCategoricalAccuracy(k=1)
    top1.update_state(np.array([[0, 0, 1], [0, 1, 0]], np.float32), scores)
    assert top1.name == "top_k_categorical_accuracy" and float(top1.result()) == pytest.approx(0.5)
    sparse = keras.metrics.SparseTopKCategoricalAccuracy(k=1)
    sparse.update_state(np.array([2, 1]), scores)
    assert sparse.name == "sparse_top_k_categorical_accuracy" and float(sparse.result()) == pytest.approx(0.5)
    ties = np.array([[0.1, 0.5, 0.5, 0.2], [0.3, 0.3, 0.3, 0.3], [0.9, 0.1, 0.1, 0.1]], np.float32)
    sparse.reset_state()
    sparse.update_state(np.array([2, 3, 1]), ties)
    assert float(sparse.result()) == pytest.approx(2 / 3)  # the first two tie with the top score
    assert float(keras.metrics.SparseTopKCategoricalAccuracy(k=2)(np.array([2, 3, 1]), ties)) == 1.0
    assert keras.metrics.TopKCategoricalAccuracy(k=3, name="top3").get_config() == {
        "name": "top3", "dtype": "float32", "k": 3}


def test_binary_accuracy_thresholds_predictions():
    metric = keras.metrics.BinaryAccuracy()
    metric.update_state([[1], [1], [0], [0]], np.array([[0.98], [1], [0], [0.6]], np.float32))
    assert metric.name == "binary_accuracy" and float(metric.result()) == pytest.approx(0.75)
    high = keras.metrics.BinaryAccuracy(threshold=0.7, name="high")
    high.update_state(np.array([[1], [0]], np.float32), np.array([[0.6], [0.4]], np.float32))
    assert float(high.result()) == pytest.approx(0.5)
    assert high.get_config() == {"name": "high", "dtype": "float32", "threshold": 0.7}


def test_hostile_options_are_refused_by_name():
    for k in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="metric TopKCategoricalAccuracy: argument k=.* must be an integer >= 1"):
            keras.metrics.TopKCategoricalAccuracy(k=k)
    with pytest.raises(ValueError, match="metric BinaryAccuracy: argument threshold=\"nan\" must be a finite number"):
        keras.metrics.BinaryAccuracy(threshold=float("nan"))
    with pytest.raises(ValueError, match="argument from_sorted_ids=true is not supported"):
        keras.metrics.SparseTopKCategoricalAccuracy(from_sorted_ids=True)
    with pytest.raises(ValueError, match="sparse_top_k_categorical_accuracy: y_true \\(3, 3\\) must hold one integer label"):
        keras.metrics.SparseTopKCategoricalAccuracy().update_state(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32))


@pytest.mark.parametrize("devices", [None, ["cpu:0", "cpu:1"]])
def test_top_k_names_and_objects_in_compile_are_logged_under_keras_names(devices):
    x, one_hot, labels = classification()
    strategy = tf.distribute.MirroredStrategy(devices) if devices else None
    m = classifier(["top_k_categorical_accuracy", keras.metrics.TopKCategoricalAccuracy(k=2, name="top2")], strategy)
    logs = m.evaluate(x, one_hot, batch_size=32, verbose=0, return_dict=True)
    scores = m.predict(x, verbose=0)
    target = scores[np.arange(len(labels)), labels][:, None]
    above = (scores > target).sum(-1)
    assert logs["top_k_categorical_accuracy"] == 1.0  # k = 5 of 5 classes
    assert logs["top2"] == pytest.approx(float(np.mean(above < 2)))
    h = m.fit(x, one_hot, batch_size=32, epochs=1, shuffle=False, verbose=0)
    assert {"loss", "top_k_categorical_accuracy", "top2"} <= set(h.history)

    with (strategy or tf.distribute.get_strategy()).scope():
        s = keras.Sequential([keras.Input((6,)), keras.layers.Dense(CLASSES, activation="softmax")])
        s.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
                  metrics=["sparse_top_k_categorical_accuracy",
                           keras.metrics.SparseTopKCategoricalAccuracy(k=3, name="top3")])
    logs = s.evaluate(x, labels, batch_size=32, verbose=0, return_dict=True)
    scores = s.predict(x, verbose=0)
    above = (scores > scores[np.arange(len(labels)), labels][:, None]).sum(-1)
    assert set(logs) == {"loss", "sparse_top_k_categorical_accuracy", "top3"}
    assert logs["sparse_top_k_categorical_accuracy"] == 1.0
    assert logs["top3"] == pytest.approx(float(np.mean(above < 3)))


def test_accuracy_with_binary_crossentropy_is_binary_accuracy():
    x, _, labels = classification()
    y = (labels >= 2).astype(np.float32)[:, None]
    keras.utils.set_random_seed(4)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1, activation="sigmoid")])
    m.compile(optimizer="sgd", loss="binary_crossentropy",
              metrics=["accuracy", "binary_accuracy", keras.metrics.BinaryAccuracy(threshold=0.7, name="high")])
    logs = m.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    p = m.predict(x, verbose=0)
    assert logs["accuracy"] == pytest.approx(float(np.mean((p > 0.5) == y)))
    assert logs["binary_accuracy"] == logs["accuracy"]
    assert logs["high"] == pytest.approx(float(np.mean((p > 0.7) == y)))


def test_a_keras_file_keeps_the_metrics_k(tmp_path):
    x, one_hot, _ = classification()
    m = classifier(["accuracy", keras.metrics.TopKCategoricalAccuracy(k=3, name="top3")])
    want = m.evaluate(x, one_hot, batch_size=32, verbose=0, return_dict=True)
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    got = loaded.evaluate(x, one_hot, batch_size=32, verbose=0, return_dict=True)
    assert got == pytest.approx(want) and "top3" in got and want["top3"] < 1.0


def test_update_state_with_sample_weight_gives_keras_numbers():
    # Keras 3.15.1's results for these batches (update_state(y_true, y_pred, sample_weight=w)).
    scores = np.array([[.9, .05, .05], [.1, .8, .1], [.3, .4, .3], [.2, .2, .6]], np.float32)
    labels, w = np.array([0, 1, 2, 1]), np.array([1, 2, 3, 4], np.float32)
    m = keras.metrics.SparseCategoricalAccuracy()
    m.update_state(labels, scores, sample_weight=w)
    assert float(m.result()) == pytest.approx(0.3, abs=1e-7)
    m = keras.metrics.CategoricalAccuracy()
    m.update_state(np.eye(3, dtype=np.float32)[labels], scores, sample_weight=w)
    assert float(m.result()) == pytest.approx(0.3, abs=1e-7)
    a = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    b = np.array([[1.5, 2], [3, 3], [4, 6.5]], np.float32)
    m = keras.metrics.MeanSquaredError()
    m.update_state(a, b, sample_weight=np.array([0.5, 1, 2], np.float32))
    assert float(m.result()) == pytest.approx(0.5178571343421936, abs=1e-7)
    m = keras.metrics.Mean()
    m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0])
    assert float(m.result()) == 2.0
    m = keras.metrics.BinaryAccuracy()
    m.update_state(np.array([[1, 0], [1, 1], [0, 0]], np.float32), np.array([[.7, .2], [.4, .9], [.6, .1]], np.float32),
                   sample_weight=np.array([2, 1, 1], np.float32))
    assert float(m.result()) == 0.75
    with pytest.raises(ValueError, match=r"sample_weight must hold one weight per example \(shape \(3,\) or \(3, 1\)\)"):
        keras.metrics.MeanSquaredError().update_state(a, b, sample_weight=np.ones(2, np.float32))


def weighted_top_class(m, x, labels, w):
    hits = np.argmax(m.predict(x, verbose=0), -1) == labels
    return float(np.sum(w * hits) / np.sum(w))


@pytest.mark.parametrize("devices", [None, ["cpu:0", "cpu:1"]])
def test_weighted_metrics_weigh_the_sample_weights_under_keras_names(devices):
    x, one_hot, labels = classification()
    w = np.random.default_rng(5).uniform(0, 2, len(x)).astype(np.float32)
    keras.utils.set_random_seed(11)
    with (tf.distribute.MirroredStrategy(devices) if devices else tf.distribute.get_strategy()).scope():
        m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(CLASSES, activation="softmax")])
        m.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=["accuracy"],
                  weighted_metrics=["accuracy", keras.metrics.TopKCategoricalAccuracy(k=2, name="top2")])
    logs = m.evaluate(x, one_hot, sample_weight=w, batch_size=32, verbose=0, return_dict=True)
    # Keras 3 logs the second "accuracy" as weighted_accuracy.
    assert set(logs) == {"loss", "accuracy", "weighted_accuracy", "top2"}
    assert logs["weighted_accuracy"] == pytest.approx(weighted_top_class(m, x, labels, w), rel=1e-6)
    assert logs["accuracy"] == pytest.approx(top_class_matches(m, x, one_hot))
    plain = m.evaluate(x, one_hot, batch_size=32, verbose=0, return_dict=True)
    assert plain["weighted_accuracy"] == plain["accuracy"]
    h = m.fit(x, one_hot, sample_weight=w, batch_size=32, epochs=1, verbose=0)
    assert {"loss", "accuracy", "weighted_accuracy", "top2"} <= set(h.history)


def test_weighted_metrics_per_output_and_a_keras_file_keeps_them(tmp_path):
    x, _, labels = classification()
    reg = np.random.default_rng(4).normal(size=(len(x), 1)).astype(np.float32)
    w = np.random.default_rng(5).uniform(0, 2, len(x)).astype(np.float32)
    keras.utils.set_random_seed(11)
    inp = keras.Input((6,))
    m = keras.Model(inp, {"cls": keras.layers.Dense(CLASSES, activation="softmax", name="cls")(inp),
                          "reg": keras.layers.Dense(1, name="reg")(inp)})
    m.compile(optimizer="sgd", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
              metrics={"cls": ["accuracy"]}, weighted_metrics={"cls": ["accuracy"], "reg": ["mae"]})
    y = {"cls": labels, "reg": reg}
    logs = m.evaluate(x, y, sample_weight={"cls": w, "reg": np.ones(len(x), np.float32)}, batch_size=32, verbose=0,
                      return_dict=True)
    assert {"cls_accuracy", "cls_weighted_accuracy", "reg_mae"} <= set(logs)
    p = m.predict(x, verbose=0)
    assert logs["cls_weighted_accuracy"] == pytest.approx(weighted_top_class_of(p["cls"], labels, w), rel=1e-6)
    assert logs["reg_mae"] == pytest.approx(float(np.mean(np.abs(p["reg"] - reg))), rel=1e-5)
    m.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert loaded.evaluate(x, y, sample_weight={"cls": w, "reg": np.ones(len(x), np.float32)}, batch_size=32,
                           verbose=0, return_dict=True) == logs
    with pytest.raises(ValueError, match="nope"):
        m.compile(optimizer="sgd", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  weighted_metrics={"nope": ["accuracy"]})
    with pytest.raises(ValueError, match="acuracy"):
        m.compile(optimizer="sgd", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  weighted_metrics={"cls": ["acuracy"]})


def weighted_top_class_of(p, labels, w):
    return float(np.sum(w * (np.argmax(p, -1) == labels)) / np.sum(w))
