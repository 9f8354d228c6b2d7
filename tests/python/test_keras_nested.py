"""keras.models.load_model on a .keras file whose model holds a model (keras.io's transfer learning:
base_model(x, training=False)), as Keras writes it: the inner model one layer entry of the outer
config, loaded with its layers flattened into the outer model."""
import json
import zipfile

import numpy as np
import pytest

import lockstep as tf


def keras_nested_file(flat_path, nested_path):
    """Keras' layout of the model flat_path holds: its layers 'scale' and 'act' (no weights) gathered
    into a Sequential 'base' called with training=False."""
    with zipfile.ZipFile(flat_path) as z:
        entries = {name: z.read(name) for name in z.namelist()}
    config = json.loads(entries["config.json"])
    x, scale, act, head = config["config"]["layers"]
    tensor_x = scale["inbound_nodes"][0]["args"][0]
    inner_input = {"module": "keras.layers", "class_name": "InputLayer",
                   "config": {"batch_shape": [None, 4], "dtype": "float32", "name": "inner_input"}}
    inner = [inner_input] + [{k: v for k, v in lay.items() if k not in ("name", "inbound_nodes")} for lay in (scale, act)]
    base = {"module": "keras", "class_name": "Sequential", "name": "base",
            "config": {"name": "base", "trainable": True, "layers": inner, "build_input_shape": [None, 4]},
            "inbound_nodes": [{"args": [tensor_x], "kwargs": {"training": False}}]}
    head["inbound_nodes"][0]["args"][0]["config"]["keras_history"] = ["base", 0, 0]
    config["config"]["layers"] = [x, base, head]
    entries["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(nested_path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)


def test_load_model_reads_a_model_that_holds_a_model(tmp_path):
    tf.keras.utils.set_random_seed(4)
    inputs = tf.keras.Input(shape=(4,), name="x")
    h = tf.keras.layers.Rescaling(0.5, name="scale")(inputs)
    h = tf.keras.layers.Activation("relu", name="act")(h)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, name="head")(h), name="outer")
    flat, nested = tmp_path / "flat.keras", tmp_path / "nested.keras"
    model.save(str(flat))
    keras_nested_file(flat, nested)

    loaded = tf.keras.models.load_model(str(nested))
    x = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert [layer.name for layer in loaded.layers] == ["x", "scale", "act", "head"]
    assert loaded.get_layer("act").name == "act"
    with pytest.raises(ValueError, match="has no layer 'base'.*is held as its layers"):
        loaded.get_layer("base")
