"""Keras' sequence convnet layers from Python: Conv1D, MaxPooling1D, AveragePooling1D, GlobalMaxPooling1D and
GlobalMaxPooling2D take Keras' positional arguments and defaults and compute what NumPy does in float64, a model
of them saves and loads as .keras, and keras.io's "Text classification from scratch" (the example program) runs
as written and learns."""
import os
import subprocess
import sys

import numpy as np
import pytest

from lockstep import keras
from lockstep.keras import layers

STEPS, CHANNELS = 11, 3


def window(steps, size, strides, padding, dilation=1):
    """(padding before the steps, output steps) by TensorFlow's rules."""
    span = (size - 1) * dilation + 1
    if padding == "valid":
        return 0, (steps - span) // strides + 1
    out = -(-steps // strides)
    return (span - 1 if padding == "causal" else max(0, (out - 1) * strides + span - steps) // 2), out


def conv1d_numpy(x, kernel, bias, strides=1, padding="valid", dilation=1, groups=1):
    size, per_group, filters = kernel.shape
    before, out = window(x.shape[1], size, strides, padding, dilation)
    padded = np.zeros((x.shape[0], before + x.shape[1] + size * dilation + strides * out, x.shape[2]))
    padded[:, before:before + x.shape[1]] = x
    y = np.zeros((x.shape[0], out, filters))
    per_filters = filters // groups
    for t in range(out):
        for j in range(size):
            rows = padded[:, t * strides + j * dilation]
            for g in range(groups):
                y[:, t, g * per_filters:(g + 1) * per_filters] += (
                    rows[:, g * per_group:(g + 1) * per_group] @ kernel[j][:, g * per_filters:(g + 1) * per_filters])
    return y + bias


def pool1d_numpy(x, size, strides, padding, reduce):
    before, out = window(x.shape[1], size, strides, padding)
    return np.stack([reduce(x[:, max(0, t * strides - before):t * strides - before + size], axis=1)
                     for t in range(out)], axis=1)


def predict(layer, x):
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, layer(inputs)).predict(x, verbose=0)


def sequences(n=4, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, STEPS, CHANNELS)).astype(np.float32)


@pytest.mark.parametrize("args,kwargs,expect", [
    ((4, 3), {}, {}),
    ((4, 3, 2, "same"), {}, {"strides": 2, "padding": "same"}),
    ((4, 3), {"padding": "causal", "dilation_rate": 2}, {"padding": "causal", "dilation": 2}),
    ((6, 2, 3, "causal"), {}, {"strides": 3, "padding": "causal"}),
    ((4, 2, 1, "valid", None, 2), {"use_bias": False}, {"dilation": 2}),
    ((6, 3, 1, "same", "channels_last", 1, 3, "relu"), {}, {"padding": "same", "groups": 3, "relu": True}),
])
def test_conv1d_takes_keras_arguments_and_computes_what_numpy_does(args, kwargs, expect):
    conv = layers.Conv1D(*args, **kwargs)
    x = sequences()
    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, conv(inputs))
    rng = np.random.default_rng(1)
    weights = [rng.uniform(-1, 1, w.shape).astype(np.float32) for w in conv.get_weights()]
    conv.set_weights(weights)
    filters, size = args[0], args[1]
    assert weights[0].shape == (size, CHANNELS // expect.get("groups", 1), filters)  # Keras' (k, in, out)
    bias = weights[1] if len(weights) > 1 else 0
    want = conv1d_numpy(x, weights[0], bias, expect.get("strides", 1), expect.get("padding", "valid"),
                        expect.get("dilation", 1), expect.get("groups", 1))
    if expect.get("relu"):
        want = np.maximum(want, 0)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_pooling_layers_take_keras_arguments_and_compute_what_numpy_does():
    x = sequences()
    np.testing.assert_array_equal(predict(layers.MaxPooling1D(), x), pool1d_numpy(x, 2, 2, "valid", np.max))
    np.testing.assert_array_equal(predict(layers.MaxPooling1D(3, 1, "same"), x), pool1d_numpy(x, 3, 1, "same", np.max))
    np.testing.assert_allclose(predict(layers.AveragePooling1D(3, 2, "same"), x),
                               pool1d_numpy(x, 3, 2, "same", np.mean), rtol=1e-6)
    np.testing.assert_allclose(predict(layers.AveragePooling1D(pool_size=4), x), pool1d_numpy(x, 4, 4, "valid", np.mean),
                               rtol=1e-6)
    np.testing.assert_array_equal(predict(layers.GlobalMaxPooling1D(), x), x.max(axis=1))
    np.testing.assert_array_equal(predict(layers.GlobalMaxPooling1D(keepdims=True), x), x.max(axis=1, keepdims=True))
    images = x.reshape(4, STEPS, 1, CHANNELS)
    np.testing.assert_array_equal(predict(layers.GlobalMaxPooling2D(), images), images.max(axis=(1, 2)))
    with pytest.raises(ValueError, match="causal"):
        layers.MaxPooling1D(2, padding="causal")


def test_a_sequence_convnet_saves_and_loads_as_keras_with_keras_class_names(tmp_path):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((STEPS, CHANNELS))
    h = layers.Conv1D(8, 3, padding="causal", activation="relu")(inputs)
    h = layers.MaxPooling1D(2, strides=1, padding="same")(h)
    h = layers.Conv1D(8, 2, strides=2, groups=2)(h)
    h = layers.AveragePooling1D()(h)
    out = layers.Dense(1, activation="sigmoid")(layers.GlobalMaxPooling1D()(h))
    model = keras.Model(inputs, out)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    x = sequences(16, seed=4)
    model.fit(x, (x[:, 0, 0] > 0).astype(np.float32), batch_size=8, epochs=1, verbose=0)
    path = str(tmp_path / "seqconv.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [layer.get_config() for layer in loaded.layers] == [layer.get_config() for layer in model.layers]
    assert [layer.get_config().get("padding") for layer in loaded.layers][1:5] == ["causal", "same", "valid", "valid"]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_the_keras_text_classification_example_runs_as_written_and_learns():
    """examples/python/text_classification_from_scratch.py: keras.io's model on synthetic reviews, 2 replicas."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                          "python", "text_classification_from_scratch.py")
    env = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}
    run = subprocess.run([sys.executable, script, "2000", "3"], capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Number of devices: 2" in run.stdout, run.stdout
    assert float(run.stdout.strip().splitlines()[-1].split(":")[1]) > 0.9, run.stdout  # chance is about 0.5
