"""keras.optimizers.RMSprop, the optimizer Keras' compile() takes when given none: Keras 3's rule and
defaults (full-batch steps computed by hand in float64), its arguments, its config in a .keras file
and its slots in a saved folder, and the steps of Keras itself where TensorFlow is installed."""
import json
import zipfile

import numpy as np
import pytest

import lockstep as tf

keras = tf.keras
BATCH = 32
STEPS = 8  # per epoch


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32) + 0.1).astype(np.float32)
    return x, y


def model(optimizer=None):
    keras.utils.set_random_seed(7)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])
    if optimizer is None:
        m.compile(loss="mse")  # Keras' default optimizer
    else:
        m.compile(optimizer=optimizer, loss="mse")
    return m


def kernel(m):
    return m.variables[0].numpy()


def reference_steps(w, steps, lr=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False):
    """Keras 3's RMSprop (keras/src/optimizers/rmsprop.py) in float64 on full-batch mse gradients."""
    x, y = (a.astype(np.float64) for a in data())
    w = w.astype(np.float64)
    v, m, a = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for _ in range(steps):
        g = 2.0 / len(x) * x.T @ (x @ w - y)
        v = rho * v + (1 - rho) * g * g
        if centered:
            a = rho * a + (1 - rho) * g
            denominator = v - a * a + epsilon
        else:
            denominator = v + epsilon
        increment = lr * g / np.sqrt(denominator)
        if momentum > 0:
            m = momentum * m + increment
            w = w - m
        else:
            w = w - increment
    return w


def full_batch_fit(m, steps):
    x, y = data()
    m.fit(x, y, batch_size=len(x), epochs=steps, shuffle=False, verbose=0)


def test_compile_without_an_optimizer_trains_keras_default_rmsprop():
    m = model()
    w0 = kernel(m)
    assert float(m.optimizer.learning_rate) == pytest.approx(0.001)
    full_batch_fit(m, 3)
    np.testing.assert_allclose(kernel(m), reference_steps(w0, 3), rtol=2e-5, atol=1e-6)
    by_name = model("rmsprop")
    full_batch_fit(by_name, 3)
    np.testing.assert_array_equal(kernel(by_name), kernel(m))
    by_class = model(keras.optimizers.RMSprop())
    full_batch_fit(by_class, 3)
    np.testing.assert_array_equal(kernel(by_class), kernel(m))


@pytest.mark.parametrize("centered,momentum", [(True, 0.0), (False, 0.9), (True, 0.5)])
def test_rmsprop_arguments_are_keras_rule(centered, momentum):
    m = model(keras.optimizers.RMSprop(learning_rate=0.01, rho=0.8, momentum=momentum, epsilon=1e-6,
                                       centered=centered))
    w0 = kernel(m)
    full_batch_fit(m, 4)
    want = reference_steps(w0, 4, lr=0.01, rho=0.8, momentum=momentum, epsilon=1e-6, centered=centered)
    np.testing.assert_allclose(kernel(m), want, rtol=2e-5, atol=1e-6)


def test_what_lockstep_lacks_and_bad_values_are_refused_by_name():
    with pytest.raises(ValueError, match="weight_decay"):
        keras.optimizers.RMSprop(weight_decay=0.01)
    with pytest.raises(ValueError, match="use_ema"):
        keras.optimizers.RMSprop(use_ema=True)
    with pytest.raises(ValueError, match="rho must be in"):
        keras.optimizers.RMSprop(rho=1.5)
    with pytest.raises(ValueError, match="momentum must be in"):
        keras.optimizers.RMSprop(momentum=-0.1)


def test_a_saved_model_keeps_rmsprop_as_keras_writes_it(tmp_path):
    """The .keras file's compile config is Keras' RMSprop object; a saved folder also keeps the slots
    (velocity, momentum, average_gradient) and iterations, so that training goes on as before."""
    m = model(keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.5, centered=True))
    x, y = data()
    m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    m.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        optimizer = json.loads(archive.read("config.json"))["compile_config"]["optimizer"]
    assert optimizer["class_name"] == "RMSprop"
    assert optimizer["config"]["name"] == "rmsprop"
    assert optimizer["config"]["centered"] is True
    assert (optimizer["config"]["rho"], optimizer["config"]["momentum"], optimizer["config"]["epsilon"]) == \
        (0.9, 0.5, 1e-7)
    m.save(tmp_path / "folder")
    loaded = keras.models.load_model(tmp_path / "folder")
    assert loaded.optimizer.iterations == STEPS
    m.fit(x, y, batch_size=BATCH, epochs=2, initial_epoch=1, shuffle=False, verbose=0)
    loaded.fit(x, y, batch_size=BATCH, epochs=2, initial_epoch=1, shuffle=False, verbose=0)
    np.testing.assert_array_equal(kernel(loaded), kernel(m))


@pytest.mark.parametrize("arguments", [{}, {"learning_rate": 0.01, "rho": 0.8, "momentum": 0.5, "centered": True}])
def test_rmsprop_steps_are_keras_3s(arguments):
    """Two epochs of batches of 32 from the same weights, in Keras 3 (TensorFlow's) and lockstep."""
    tensorflow = pytest.importorskip("tensorflow")
    real = tensorflow.keras
    if not real.__version__.startswith("3"):
        pytest.skip(f"needs Keras 3, TensorFlow has Keras {real.__version__}")
    x, y = data()
    m = model(keras.optimizers.RMSprop(**arguments))
    reference = real.Sequential([real.Input((4,)), real.layers.Dense(1, use_bias=False)])
    reference.set_weights([kernel(m)])
    reference.compile(optimizer=real.optimizers.RMSprop(**arguments), loss="mse")
    reference.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    m.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(kernel(m), reference.get_weights()[0], rtol=1e-5, atol=1e-6)
