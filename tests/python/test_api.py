"""The Python package's API: import, fit/evaluate/predict on NumPy and tf.data, errors, saving."""
import os
import subprocess
import sys

import numpy as np
import pytest

import lockstep
import lockstep as tf
from conftest import mlp

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tf_names_are_the_packages_modules():
    assert tf.keras is lockstep.keras
    assert tf.distribute is lockstep.distribute
    assert tf.data is lockstep.data
    assert tf.keras.Sequential is lockstep.keras.models.Sequential
    assert issubclass(tf.errors.DistributedError, RuntimeError)


def test_unsupported_names_are_named():
    with pytest.raises(AttributeError, match=r"lockstep does not support tf\.keras\.layers\.Conv3D yet"):
        tf.keras.layers.Conv3D(32, 3)
    with pytest.raises(AttributeError, match=r"lockstep does not support tf\.TensorArray yet"):
        tf.TensorArray()
    with pytest.raises(AttributeError, match=r"lockstep does not support tf\.nn\.conv2d yet"):
        tf.nn.conv2d()
    with pytest.raises(AttributeError, match=r"tf\.distribute\.TPUStrategy"):
        tf.distribute.TPUStrategy()
    assert not hasattr(tf.keras.layers, "Conv3D")
    with pytest.raises(ValueError, match="keras.Model needs inputs and outputs"):
        tf.keras.Model()


def test_unsupported_arguments_are_named():
    with pytest.raises(ValueError, match="amsgrad"):
        tf.keras.optimizers.Adam(amsgrad=True)
    with pytest.raises(ValueError, match="argument kernel_regularizer"):
        tf.keras.layers.Dense(4, kernel_regularizer="l2")
    with pytest.raises(AttributeError, match=r"tf\.data\.Dataset\.filter"):
        tf.data.Dataset.range(4).filter(lambda x: x)


def test_every_registered_layer_class_is_reachable():
    made = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")
    assert made.get_config()["kernel_size"] == [3, 3]
    assert tf.keras.layers.MaxPooling2D().get_config()["pool_size"] == [2, 2]
    for name in lockstep._lockstep.layer_class_names().split(", "):
        if name != "InputLayer":
            assert callable(getattr(tf.keras.layers, name)), name


def test_fit_numpy_under_mirrored_strategy(mnist_small):
    (x, y), (x_test, y_test) = mnist_small
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync >= 1
    with strategy.scope():
        model = mlp(tf)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    history = model.fit(x, y, batch_size=64, epochs=2, validation_data=(x_test, y_test), verbose=0)
    assert isinstance(history.history, dict)
    assert {"accuracy", "loss", "val_accuracy", "val_loss"} <= set(history.history)
    assert all(isinstance(v, list) and len(v) == 2 for v in history.history.values())
    assert all(isinstance(v, float) for v in history.history["loss"])
    assert history.epoch == [0, 1]
    assert history.history["loss"][1] < history.history["loss"][0]
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.85
    assert model.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"] == pytest.approx(accuracy)

    predictions = model.predict(x_test[:10])
    assert isinstance(predictions, np.ndarray)
    assert predictions.shape == (10, 10) and predictions.dtype == np.float32
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, rtol=1e-5)


def test_fit_on_tf_data(mnist_small):
    (x, y), _ = mnist_small
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(100).repeat().prefetch(tf.data.AUTOTUNE)
    model = mlp(tf)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    history = model.fit(ds, epochs=2, steps_per_epoch=30, verbose=0)
    assert len(history.history["loss"]) == 2


def test_dataset_iterates_as_numpy():
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    y = np.arange(5, dtype=np.int64)
    batches = list(tf.data.Dataset.from_tensor_slices((x, y)).batch(2))
    assert [b[0].shape for b in batches] == [(2, 2), (2, 2), (1, 2)]
    np.testing.assert_array_equal(batches[2][1], [4])
    assert list(tf.data.Dataset.range(3)) == [0, 1, 2]


def test_bad_shape_is_a_value_error(mnist_small):
    (x, y), _ = mnist_small
    model = mlp(tf)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=r"28"):
        model.fit(x[:64].reshape(64, 784), y[:64], epochs=1, verbose=0)
    with pytest.raises(ValueError, match="float64|dtype"):
        lockstep._lockstep.Dataset.from_tensor_slices([np.zeros((2, 2), dtype=np.complex64)])


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError, match="nothing-here"):
        tf.keras.models.load_model(str(tmp_path / "nothing-here.keras"))


def test_keras_file_round_trip_predicts_the_same(tmp_path, mnist_small):
    (x, y), (x_test, _) = mnist_small
    model = mlp(tf)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x[:1000], y[:1000], epochs=1, verbose=0)
    path = tmp_path / "mlp.keras"
    model.save(str(path))
    loaded = tf.keras.models.load_model(str(path))
    np.testing.assert_array_equal(model.predict(x_test[:50]), loaded.predict(x_test[:50]))
    assert loaded.metrics_names == ["loss", "accuracy"]


def test_seed_fit_program(tmp_path):
    """The seeds' fit program with only the import changed reaches 0.97 test accuracy."""
    script = os.path.join(REPO, "examples", "python", "mirrored_mnist_fit.py")
    # Two replicas (global batch 128), as on CI's two cores, whatever this machine has.
    env = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}
    run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    accuracy = float(run.stdout.strip().splitlines()[-1].split(":")[1])
    assert accuracy >= 0.97, run.stdout
    assert os.listdir(tmp_path / "training_checkpoints"), "ModelCheckpoint saved nothing"
    assert os.path.isdir(tmp_path / "logs" / "train"), "TensorBoard wrote no logs"


def test_python_callbacks_see_fit_and_can_stop_it(mnist_small):
    (x, y), _ = mnist_small

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self):
            self.epochs, self.batches = [], 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append((epoch, logs["loss"]))
            if epoch == 1:
                self.model.stop_training = True

    recorder = Recorder()
    ends = []
    model = mlp(tf)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = model.fit(x[:640], y[:640], batch_size=64, epochs=5, verbose=0,
                        callbacks=[recorder, tf.keras.callbacks.LambdaCallback(on_train_end=ends.append)])
    assert [e for e, _ in recorder.epochs] == [0, 1] and history.epoch == [0, 1]
    assert recorder.batches == 20 and recorder.model is model
    assert recorder.epochs[1][1] == pytest.approx(history.history["loss"][1])
    assert len(ends) == 1

    class Failing(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        model.fit(x[:64], y[:64], epochs=1, verbose=0, callbacks=[Failing()])


def test_steps_per_execution_passes_through(mnist_small):
    # Keras 3's compile(steps_per_execution=N): batch callbacks once per N batches, with the
    # execution's first and last batch, and the weights (here: the predictions) of N = 1.
    (x, y), (x_test, _) = mnist_small

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self):
            self.calls = []

        def on_train_batch_begin(self, batch, logs=None):
            self.calls.append(("begin", batch))

        def on_train_batch_end(self, batch, logs=None):
            self.calls.append(("end", batch))

    def run(n):
        tf.keras.utils.set_random_seed(5)
        model = mlp(tf)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", steps_per_execution=n)
        assert model.steps_per_execution == n
        recorder = Recorder()
        history = model.fit(x[:640], y[:640], batch_size=64, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])
        return recorder.calls, history.history["loss"], model.predict(x_test[:100], verbose=0)

    calls, loss, predicted = run(4)
    assert calls == [("begin", 0), ("end", 3), ("begin", 4), ("end", 7), ("begin", 8), ("end", 9)]
    _, loss_one, predicted_one = run(1)
    assert loss == loss_one
    np.testing.assert_array_equal(predicted, predicted_one)
    model = mlp(tf)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="steps_per_execution must be a positive integer"):
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", steps_per_execution=bad)
