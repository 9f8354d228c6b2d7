"""Layer calls that give several tensors, as Keras' functional API: LSTM(return_state=True) gives a
list [output, h, c] whose states start a decoder (initial_state=[h, c]) in keras.io's seq2seq
example, which trains, saves and loads; MultiHeadAttention(return_attention_scores=True) gives a
tuple (output, scores) whose scores are the attention's probabilities."""
import numpy as np
import pytest

import lockstep as tf

keras, layers = tf.keras, tf.keras.layers


def seq2seq():
    encoder_inputs, decoder_inputs = keras.Input(shape=(6, 2)), keras.Input(shape=(4, 1))
    encoder_outputs, state_h, state_c = layers.LSTM(8, return_state=True, name="encoder")(encoder_inputs)
    decoder = layers.LSTM(8, return_sequences=True, name="decoder")(decoder_inputs, initial_state=[state_h, state_c])
    model = keras.Model([encoder_inputs, decoder_inputs], layers.Dense(1)(decoder))
    model.compile(optimizer=keras.optimizers.Adam(2e-2), loss="mse")
    return model


def test_return_state_gives_a_list_whose_states_are_the_last_step():
    inputs = keras.Input(shape=(5, 3))
    outs = layers.GRU(4, return_sequences=True, return_state=True)(inputs)
    assert isinstance(outs, list) and [o.shape for o in outs] == [(None, 5, 4), (None, 4)]
    model = keras.Model(inputs, outs)
    x = np.random.default_rng(0).normal(size=(3, 5, 3)).astype(np.float32)
    sequence, h = model.predict(x, verbose=0)
    np.testing.assert_array_equal(sequence[:, -1], h)
    with pytest.raises(ValueError, match="return_state=True"):
        keras.Sequential([keras.Input(shape=(5, 3)), layers.LSTM(4, return_state=True)])


def test_an_encoder_decoder_trains_through_the_states_and_saves_and_loads(tmp_path):
    tf.keras.utils.set_random_seed(2)
    model = seq2seq()
    rng = np.random.default_rng(1)
    enc = rng.normal(size=(64, 6, 2)).astype(np.float32)
    dec = np.zeros((64, 4, 1), np.float32)
    y = np.repeat(enc[:, :, :1].mean(axis=1, keepdims=True), 4, axis=1)  # only the states carry it
    encoder_kernel = model.get_layer("encoder").get_weights()[0].copy()
    history = model.fit([enc, dec], y, epochs=30, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.3 * history.history["loss"][0]
    assert not np.array_equal(encoder_kernel, model.get_layer("encoder").get_weights()[0])
    path = str(tmp_path / "seq2seq.keras")
    model.save(path)
    np.testing.assert_array_equal(keras.models.load_model(path).predict([enc, dec], verbose=0),
                                  model.predict([enc, dec], verbose=0))


def test_attention_scores_are_a_tuple_of_probabilities_under_the_causal_mask():
    x = keras.Input(shape=(5, 8))
    out, scores = layers.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True, return_attention_scores=True)
    assert scores.shape == (None, 2, 5, 5)
    model = keras.Model(x, [out, scores])
    got_out, got_scores = model.predict(np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32),
                                        verbose=0)
    assert got_out.shape == (2, 5, 8)
    np.testing.assert_allclose(got_scores.sum(axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(np.triu(got_scores, k=1), 0.0)  # no query attends to a later step
