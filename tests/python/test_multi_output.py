"""Layer calls that give several tensors, as Keras' functional API: LSTM(return_state=True) gives a
list [output, h, c] whose states start a decoder (initial_state=[h, c]) in keras.io's seq2seq
example, which trains, saves and loads; MultiHeadAttention(return_attention_scores=True) gives a
tuple (output, scores) whose scores are the attention's probabilities; Bidirectional(merge_mode=None)
gives a list [forward output, backward output]."""
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


def test_bidirectional_merge_mode_none_gives_a_list_of_both_directions(tmp_path):
    x = keras.Input(shape=(5, 3))
    bi = layers.Bidirectional(layers.LSTM(4, return_sequences=True), merge_mode=None)
    outs = bi(x)
    assert isinstance(outs, list) and [o.shape for o in outs] == [(None, 5, 4), (None, 5, 4)]
    model = keras.Model(x, outs)
    concat = keras.Model(x, layers.Concatenate()(outs))
    data = np.random.default_rng(4).normal(size=(2, 5, 3)).astype(np.float32)
    forward, backward = model.predict(data, verbose=0)
    np.testing.assert_array_equal(concat.predict(data, verbose=0), np.concatenate([forward, backward], axis=-1))
    # The backward layer read the sequence from its end: its output at step t saw steps t..4, so
    # changing the first step leaves its later steps alone, unlike the forward layer's.
    changed = data.copy()
    changed[:, 0] += 1.0
    forward2, backward2 = model.predict(changed, verbose=0)
    np.testing.assert_array_equal(backward2[:, 1:], backward[:, 1:])
    assert not np.array_equal(forward2[:, 1:], forward[:, 1:])
    lines = []
    model.summary(print_fn=lines.append)
    assert "[(None, 5, 4), (None, 5, 4)]" in lines[0]  # Keras' shape column: the call's shapes as a list
    path = str(tmp_path / "unmerged.keras")
    model.save(path)
    for got, want in zip(keras.models.load_model(path).predict(data, verbose=0), (forward, backward)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="merge_mode=None"):
        keras.Sequential([keras.Input(shape=(5, 3)), layers.Bidirectional(layers.GRU(4), merge_mode=None)])
