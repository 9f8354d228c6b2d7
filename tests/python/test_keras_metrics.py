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
    x, one_hot, _ = classification()
    with pytest.raises(ValueError, match="unknown metric 'top_k_categorical_accuracy'"):
        classifier(["top_k_categorical_accuracy"])
    with pytest.raises(AttributeError, match="tf.keras.metrics.TopKCategoricalAccuracy"):
        keras.metrics.TopKCategoricalAccuracy(k=2)
