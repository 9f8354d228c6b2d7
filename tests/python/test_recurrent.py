"""Keras 3's recurrent layers from Python: keras.layers.LSTM (and SimpleRNN, GRU) after a masked
Embedding learns a sequence task, saves and loads, and refuses by name what lockstep does not run."""
import numpy as np
import pytest

import lockstep as tf

keras, layers = tf.keras, tf.keras.layers

STEPS, VOCAB = 8, 7


def sequences(n, seed):
    """Rows of 2..STEPS tokens in [2, VOCAB) padded with 0; the label: whether token 1 is among them."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, STEPS), np.float32)
    y = np.zeros((n, 1), np.float32)
    for i in range(n):
        length = rng.integers(2, STEPS + 1)
        x[i, :length] = rng.integers(2, VOCAB, size=length)
        if rng.integers(0, 2):
            x[i, rng.integers(0, length)] = 1
            y[i] = 1
    return x, y


def test_an_lstm_after_a_masked_embedding_learns_whether_a_token_appears(tmp_path):
    tf.keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input(shape=(STEPS,)), layers.Embedding(VOCAB, 8, mask_zero=True),
                              layers.LSTM(16), layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(2e-2), loss="binary_crossentropy", metrics=["accuracy"])
    x, y = sequences(512, 1)
    model.fit(x, y, epochs=12, batch_size=32, verbose=0)
    tx, ty = sequences(256, 2)
    assert model.evaluate(tx, ty, batch_size=128, verbose=0, return_dict=True)["accuracy"] > 0.95
    path = str(tmp_path / "lstm.keras")
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_array_equal(again.predict(tx, verbose=0), model.predict(tx, verbose=0))


def test_simple_rnn_and_gru_take_keras_arguments():
    rnn = layers.SimpleRNN(4, "relu", return_sequences=True, go_backwards=True)
    config = rnn.get_config()
    assert (config["units"], config["activation"], config["return_sequences"], config["go_backwards"]) == \
        (4, "relu", True, True)
    gru = layers.GRU(3, reset_after=False, dropout=0.2, recurrent_dropout=0.1)
    assert (gru.get_config()["dropout"], gru.get_config()["recurrent_dropout"]) == pytest.approx((0.2, 0.1))
    model = keras.Sequential([keras.Input(shape=(5, 2)), rnn, gru])
    assert model.predict(np.ones((2, 5, 2), np.float32), verbose=0).shape == (2, 3)
    assert [tuple(w.shape) for w in gru.weights] == [(4, 9), (3, 9), (9,)]


@pytest.mark.parametrize("argument", [dict(stateful=True), dict(unroll=True), dict(dropout=1.0)])
def test_options_lockstep_does_not_run_are_refused_by_name(argument):
    (key, _), = argument.items()
    with pytest.raises(ValueError, match=key):
        layers.LSTM(4, **argument)


def test_bidirectional_lstm_after_a_masked_embedding_learns_saves_and_loads(tmp_path):
    tf.keras.utils.set_random_seed(3)
    bi = layers.Bidirectional(layers.LSTM(8))
    model = keras.Sequential([keras.Input(shape=(STEPS,)), layers.Embedding(VOCAB, 8, mask_zero=True), bi,
                              layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(2e-2), loss="binary_crossentropy", metrics=["accuracy"])
    x, y = sequences(512, 1)
    model.fit(x, y, epochs=12, batch_size=32, verbose=0)
    tx, ty = sequences(256, 2)
    assert model.evaluate(tx, ty, batch_size=128, verbose=0, return_dict=True)["accuracy"] > 0.95
    config = bi.get_config()
    assert config["merge_mode"] == "concat"
    assert config["layer"]["config"]["name"] == "forward_lstm"
    assert config["backward_layer"]["config"]["go_backwards"] is True
    assert len(bi.weights) == 6
    path = str(tmp_path / "bidirectional.keras")
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_array_equal(again.predict(tx, verbose=0), model.predict(tx, verbose=0))


@pytest.mark.parametrize("mode", ["sum", "mul", "ave"])
def test_bidirectional_merge_modes_give_the_forward_units(mode):
    model = keras.Sequential([keras.Input(shape=(STEPS, 3)),
                              layers.Bidirectional(layers.GRU(4, return_sequences=True), merge_mode=mode)])
    assert model.predict(np.ones((2, STEPS, 3), np.float32), verbose=0).shape == (2, STEPS, 4)


def test_bidirectional_refuses_return_state_and_other_layers_by_name():
    with pytest.raises(ValueError, match="return_state=True"):
        layers.Bidirectional(layers.LSTM(4, return_state=True), merge_mode=None)
    with pytest.raises(ValueError, match="must be a recurrent layer"):
        layers.Bidirectional(layers.Dense(4))
