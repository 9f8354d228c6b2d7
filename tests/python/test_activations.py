"""Keras 3's activation names, advanced activation layers and SeparableConv2D from Python, and the
ValueError a mistyped layer argument gives (naming the layer, the argument and the type wanted)."""
import numpy as np
import pytest

import lockstep as tf

keras, layers = tf.keras, tf.keras.layers

X = np.array([[-30.0, -2.0, -0.5, 0.0, 0.5, 2.0, 30.0]], np.float32)


def predict(layer, x=X):
    model = keras.Sequential([keras.Input(shape=x.shape[1:]), layer])
    return model.predict(x, verbose=0)


def test_activation_names_compute_keras_formulas():
    x = X.astype(np.float64)
    softplus = np.logaddexp(0, x)
    hard_sigmoid = np.clip(x + 3, 0, 6) / 6
    want = {
        "elu": np.where(x > 0, x, np.expm1(x)),
        "selu": 1.05070098 * np.where(x > 0, x, 1.67326324 * np.expm1(x)),
        "leaky_relu": np.where(x > 0, x, 0.2 * x),
        "relu6": np.clip(x, 0, 6),
        "softplus": softplus,
        "softsign": x / (1 + np.abs(x)),
        "hard_sigmoid": hard_sigmoid,
        "hard_silu": x * hard_sigmoid,
        "hard_swish": x * hard_sigmoid,
        "exponential": np.exp(x),
        "mish": x * np.tanh(softplus),
    }
    for name, values in want.items():
        np.testing.assert_allclose(predict(layers.Activation(name)), values, rtol=2e-6, atol=1e-30, err_msg=name)
    dense = layers.Dense(3, activation="mish")
    assert dense.get_config()["activation"] == "mish"
    with pytest.raises(ValueError, match="unknown activation 'celus'"):
        layers.Dense(3, activation="celus")


def test_the_remaining_keras3_activation_names_compute_keras_formulas():
    x = X.astype(np.float64)
    want = {
        "celu": np.where(x > 0, x, np.expm1(x)),
        "hard_tanh": np.clip(x, -1, 1),
        "log_sigmoid": -np.logaddexp(0, -x),
        "hard_shrink": np.where(np.abs(x) > 0.5, x, 0),
        "soft_shrink": np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
        "tanh_shrink": x - np.tanh(x),
        "squareplus": (x + np.sqrt(x * x + 4)) / 2,
        "sparse_plus": np.where(x <= -1, 0, np.where(x < 1, (x + 1) ** 2 / 4, x)),
        "sparse_sigmoid": np.where(x <= -1, 0, np.where(x >= 1, 1, (x + 1) / 2)),
    }
    for name, values in want.items():
        np.testing.assert_allclose(predict(layers.Activation(name)), values, rtol=2e-6, atol=1e-6, err_msg=name)
        assert layers.Dense(2, activation=name).get_config()["activation"] == name
    for name, why in (("glu", "halves the last axis"), ("sparsemax", "sort"), ("threshold", "no defaults")):
        with pytest.raises(ValueError, match=why):
            layers.Activation(name)


def test_advanced_activation_layers_take_keras_arguments_and_defaults():
    np.testing.assert_allclose(predict(layers.LeakyReLU()), np.where(X > 0, X, 0.3 * X), rtol=1e-6)
    np.testing.assert_allclose(predict(layers.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.5)),
                               np.where(X > 0.5, np.minimum(X, 1.0), 0) - 0.1 * np.maximum(0.5 - X, 0), rtol=1e-6)
    np.testing.assert_allclose(predict(layers.ELU(alpha=0.5)), np.where(X > 0, X, 0.5 * np.expm1(X)), rtol=1e-6)
    config = layers.ReLU(6.0).get_config()
    assert (config["max_value"], config["negative_slope"], config["threshold"]) == (6.0, 0.0, 0.0)
    assert layers.PReLU(shared_axes=[1]).get_config()["shared_axes"] == [1]
    with pytest.raises(ValueError, match="negative_slope"):
        layers.LeakyReLU(negative_slope=-1)
    with pytest.warns(UserWarning, match="`alpha` is deprecated"):  # Keras 3 still takes it
        assert layers.LeakyReLU(alpha=0.1).get_config()["negative_slope"] == pytest.approx(0.1)


def test_prelu_alpha_trains_and_the_model_round_trips(tmp_path):
    model = keras.Sequential([keras.Input(shape=(4, 3)), layers.PReLU(shared_axes=[1]), layers.Flatten(),
                              layers.Dense(1)])
    prelu = model.layers[0]
    assert [w.name.split("/")[-1] for w in prelu.weights] == ["alpha"]
    assert prelu.get_weights()[0].shape == (1, 3)
    x = np.random.default_rng(0).normal(size=(32, 4, 3)).astype(np.float32)
    y = x.sum(axis=(1, 2))[:, None]
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    assert np.abs(prelu.get_weights()[0]).max() > 0  # alpha starts at zeros and moves
    path = str(tmp_path / "prelu.keras")
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


def test_separable_conv2d_is_depthwise_then_pointwise_and_round_trips(tmp_path):
    sep = layers.SeparableConv2D(4, 3, padding="same", depth_multiplier=2, activation="relu")
    model = keras.Sequential([keras.Input(shape=(5, 6, 3)), sep])
    assert [w.name.split("/")[-1] for w in sep.weights] == ["depthwise_kernel", "pointwise_kernel", "bias"]
    assert [w.shape for w in sep.get_weights()] == [(3, 3, 3, 2), (1, 1, 6, 4), (4,)]
    rng = np.random.default_rng(1)
    sep.set_weights([rng.normal(size=s).astype(np.float32) for s in ((3, 3, 3, 2), (1, 1, 6, 4), (4,))])
    dk, pk, bias = sep.get_weights()
    x = rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    depthwise = np.zeros((2, 5, 6, 3, 2))
    for i in range(5):
        for j in range(6):
            depthwise[:, i, j] = np.einsum("nabc,abcm->ncm", padded[:, i:i + 3, j:j + 3], dk)
    want = np.maximum(depthwise.reshape(2, 5, 6, 6) @ pk[0, 0] + bias, 0)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-4, atol=1e-5)
    path = str(tmp_path / "separable.keras")
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("make, message", [
    (lambda: layers.Dense("abc"), 'Dense: argument units="abc" must be an integer'),
    (lambda: layers.LSTM("abc"), 'LSTM: argument units="abc" must be an integer'),
    (lambda: layers.Dense(3, use_bias="yes"), 'Dense: argument use_bias="yes" must be true or false'),
    (lambda: layers.Conv2D(3, ("a", 3)),
     'Conv2D: argument kernel_size=["a",3] must be an integer or a list of 2 integers'),
    (lambda: layers.Dense(3, activation=5), "Dense: argument activation=5 must be a string"),
    (lambda: layers.ELU(alpha="big"), 'ELU: argument alpha="big" must be a finite number'),
    (lambda: layers.Dense([3]), "Dense: argument units=[3] must be an integer"),
    (lambda: layers.Dense(3.5), "Dense: argument units=3.5 must be an integer"),
    (lambda: layers.Dense(3, use_bias=None), "Dense: argument use_bias=null must be true or false"),
    (lambda: layers.Dropout(1e300), "Dropout: argument rate=1e+300 is past float32's range"),
])
def test_a_mistyped_argument_is_named_with_the_type_wanted(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == message
