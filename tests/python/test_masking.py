"""Keras 3's masks from Python: keras.layers.Masking and Softmax(x, mask=m), as Keras computes them."""
import numpy as np
import pytest

import lockstep as tf

keras, layers = tf.keras, tf.keras.layers


def padded_steps():
    """Two examples of 3 steps of 2 features; row 0's middle step and row 1's last are all zeros."""
    return np.array([[[1, 2], [0, 0], [0, 3]], [[5, 5], [5, 5], [0, 0]]], np.float32)


def test_masking_leaves_the_padded_steps_out_of_the_average_and_round_trips(tmp_path):
    masking = layers.Masking(mask_value=0.0)
    assert masking.get_config()["mask_value"] == 0.0
    model = keras.Sequential([keras.Input(shape=(3, 2)), masking, layers.GlobalAveragePooling1D()])
    # Keras' rule: a step counts where any feature differs from mask_value.
    np.testing.assert_allclose(model.predict(padded_steps(), verbose=0), [[0.5, 2.5], [5, 5]], rtol=1e-6)
    fives = keras.Sequential([keras.Input(shape=(3, 2)), layers.Masking(5.0), layers.GlobalAveragePooling1D()])
    np.testing.assert_allclose(fives.predict(padded_steps(), verbose=0), [[1 / 3, 5 / 3], [0, 0]], rtol=1e-6)
    path = str(tmp_path / "masking.keras")
    fives.save(path)
    again = keras.models.load_model(path)
    assert [c["mask_value"] for c in (l.get_config() for l in again.layers) if "mask_value" in c] == [5.0]
    np.testing.assert_array_equal(again.predict(padded_steps(), verbose=0), fives.predict(padded_steps(), verbose=0))


def test_softmax_takes_a_mask_in_the_functional_api():
    scores, mask = keras.Input(shape=(4,)), keras.Input(shape=(4,))
    model = keras.Model([scores, mask], layers.Softmax()(scores, mask=mask))
    x = np.array([[1, 2, 3, 4], [1, 2, 3, 4]], np.float32)
    m = np.array([[1, 0.6, 0.4, 1], [0, 0, 0, 0]], np.float32)  # a float mask keeps what is above 0.5
    e = np.exp([1.0, 2.0, 4.0])
    want = np.array([[e[0], e[1], 0, e[2]] / e.sum(), [0, 0, 0, 0]], np.float32)
    np.testing.assert_allclose(model.predict([x, m], verbose=0), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="the mask must be broadcastable to the inputs"):
        layers.Softmax()(keras.Input(shape=(4, 5)), mask=keras.Input(shape=(3, 5)))
    with pytest.raises(ValueError, match="mask in keras.layers.Dense.__call__"):
        layers.Dense(2)(scores, mask=mask)
