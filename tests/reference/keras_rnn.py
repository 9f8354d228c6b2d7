#!/usr/bin/env python3
"""Keras 3's recurrent layers (SimpleRNN, LSTM, GRU) both ways against real Keras (TF backend).

usage: keras_rnn.py DIR LOCKSTEP_CLI KERAS_FILES_DRIVER

(a) Keras builds models of every recurrent layer with random weights (biases too): a Sequential
    Embedding(mask_zero=True) -> SimpleRNN -> GRU(go_backwards, reset_after=False) -> LSTM (with
    dropout and recurrent_dropout, which inference leaves out) -> GRU
    -> Dense, its Functional twin (Keras writes the mask as a NotEqual node), and float steps
    through Masking -> LSTM(zero_output_for_mask) -> SimpleRNN(go_backwards); padding at the end,
    the start and the middle of rows; Bidirectional wrappers of each layer (every merge mode, a
    given backward layer of another class). `lockstep predict` on Keras' .keras file gives Keras'
    predictions (relative 1e-5), and lockstep's re-save loads in Keras and predicts the same.
(b) Keras' save_weights file loads into lockstep's copy (the weights under each layer's cell).
(c) lockstep trains the same kind of model (keras_files_driver train rnn) and saves it; Keras
    loads it and predicts what `lockstep predict` does (relative 1e-5).
(d) Layer calls of several tensors: Keras' encoder-decoder (an LSTM encoder with return_state
    after a masked Embedding; an LSTM and a GRU decoder started from its states by
    initial_state=[...]) and a MultiHeadAttention with return_attention_scores whose scores are a
    model output; Bidirectional(merge_mode=None) after a masked Embedding (both directions as
    outputs, summed into a second one whose two outputs a Dense reads). Keras' file predicts the
    same in lockstep (keras_files_driver multi-predict), and lockstep's re-save in Keras.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, lockstep_predict, np, keras  # noqa: E402

RTOL = 1e-5
VOCAB, STEPS = 9, 7


def randomize(model, seed):
    rng = np.random.RandomState(seed)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def recurrent_layers():
    return [keras.layers.Embedding(VOCAB, 6, mask_zero=True),
            keras.layers.SimpleRNN(6, return_sequences=True),
            keras.layers.GRU(5, return_sequences=True, go_backwards=True, reset_after=False),
            keras.layers.LSTM(5, return_sequences=True, dropout=0.2, recurrent_dropout=0.1),
            keras.layers.GRU(4),
            keras.layers.Dense(3, activation="softmax")]


def keras_sequential():
    keras.utils.set_random_seed(1)
    return randomize(keras.Sequential([keras.Input((STEPS,))] + recurrent_layers(), name="keras_rnn_sequential"), 2)


def keras_functional():
    keras.utils.set_random_seed(1)
    inp = keras.Input((STEPS,))
    x = inp
    for layer in recurrent_layers():
        x = layer(x)
    return randomize(keras.Model(inp, x, name="keras_rnn_functional"), 3)


def keras_masking():
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((STEPS, 3)), keras.layers.Masking(0.0),
                              keras.layers.LSTM(4, return_sequences=True, zero_output_for_mask=True),
                              keras.layers.SimpleRNN(3, activation="relu", go_backwards=True),
                              keras.layers.Dense(2)], name="keras_rnn_masking")
    return randomize(model, 5)


def bidirectional_layers():
    return [keras.layers.Embedding(VOCAB, 6, mask_zero=True),
            keras.layers.Bidirectional(keras.layers.LSTM(5, return_sequences=True), merge_mode="sum"),
            keras.layers.Bidirectional(keras.layers.SimpleRNN(3, return_sequences=True), merge_mode="mul"),
            keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True), merge_mode="ave"),
            keras.layers.Bidirectional(keras.layers.LSTM(4),
                                       backward_layer=keras.layers.GRU(4, activation="relu", go_backwards=True)),
            keras.layers.Dense(3, activation="softmax")]


def keras_bidirectional(functional):
    keras.utils.set_random_seed(8)
    if not functional:
        return randomize(keras.Sequential([keras.Input((STEPS,))] + bidirectional_layers(),
                                          name="keras_rnn_bidirectional"), 9)
    inp = keras.Input((STEPS,))
    x = inp
    for layer in bidirectional_layers():
        x = layer(x)
    return randomize(keras.Model(inp, x, name="keras_rnn_bidirectional_functional"), 9)


def both_ways(model, x, d, cli, driver, what):
    return kf.both_ways(model, x, d, cli, driver, what, RTOL)


def keras_seq2seq():
    keras.utils.set_random_seed(10)
    tokens, decoder_inputs = keras.Input((STEPS,), name="tokens"), keras.Input((5, 2), name="decoder_inputs")
    x = keras.layers.Embedding(VOCAB, 4, mask_zero=True)(tokens)
    _, h, c = keras.layers.LSTM(6, return_state=True, name="encoder")(x)
    y = keras.layers.LSTM(6, return_sequences=True, name="decoder")(decoder_inputs, initial_state=[h, c])
    z = keras.layers.GRU(6, return_sequences=True, name="decoder_gru")(decoder_inputs, initial_state=[h])
    out = keras.layers.Dense(3)(keras.layers.Concatenate()([y, z]))
    return randomize(keras.Model([tokens, decoder_inputs], out, name="keras_seq2seq"), 11)


def keras_attention_scores():
    keras.utils.set_random_seed(12)
    query, value = keras.Input((4, 8), name="query"), keras.Input((6, 8), name="value")
    out, scores = keras.layers.MultiHeadAttention(2, 3, name="mha")(query, value, return_attention_scores=True)
    return randomize(keras.Model([query, value], [out, scores], name="keras_mha_scores"), 13)


def keras_unmerged_bidirectional():
    keras.utils.set_random_seed(15)
    tokens = keras.Input((STEPS,), name="tokens")
    x = keras.layers.Embedding(VOCAB, 4, mask_zero=True)(tokens)
    forward, backward = keras.layers.Bidirectional(keras.layers.LSTM(5, return_sequences=True), merge_mode=None,
                                                   name="bi_lstm")(x)
    h1, h2 = keras.layers.Bidirectional(keras.layers.GRU(3), merge_mode=None)(keras.layers.Add()([forward, backward]))
    out = keras.layers.Dense(2, name="head")(keras.layers.Concatenate()([h1, h2]))
    return randomize(keras.Model(tokens, [forward, backward, out], name="keras_unmerged_bidirectional"), 16)


def multi_both_ways(model, xs, d, driver, what):
    """both_ways for a model of several outputs (outputs named in sorted order): Keras' file and
    lockstep's re-save through multi-predict."""
    want = model.predict(xs, verbose=0)
    want = want if isinstance(want, list) else [want]
    path = os.path.join(d, f"{model.name}.keras")
    model.save(path)
    names = []
    for i, a in enumerate(xs):
        names.append(os.path.join(d, f"{model.name}_x{i}.npy"))
        np.save(names[-1], a.astype(np.float32))
    prefix = os.path.join(d, f"{model.name}_")
    r = run(driver, "multi-predict", path, *names, prefix)
    if r.returncode != 0:
        check(False, f"{what}: lockstep multi-predict: {r.stderr.strip()}")
    else:
        outs = sorted(f for f in os.listdir(d) if f.startswith(f"{model.name}_") and f.endswith(".npy")
                      and not f[len(model.name) + 1:].startswith("x"))
        # lockstep names a call's tensor k > 0 "<layer>_<k>": in order, after the first.
        got = [np.load(os.path.join(d, f)) for f in outs]
        check(len(got) == len(want), f"{what}: lockstep gives {len(got)} outputs ({outs}), Keras {len(want)}")
        for k, (g, w) in enumerate(zip(got, want)):
            e = rel(g, w)
            check(g.shape == w.shape and e <= RTOL, f"{what}: lockstep predicts Keras' output {k} (rel {e:.2e})")
    again = os.path.join(d, f"{model.name}_resaved.keras")
    r = run(driver, "resave", path, again)
    if r.returncode != 0:
        check(False, f"{what}: resave: {r.stderr.strip()}")
        return
    back = keras.saving.load_model(again).predict(xs, verbose=0)
    back = back if isinstance(back, list) else [back]
    for k, (g, w) in enumerate(zip(back, want)):
        e = rel(g, w)
        check(e <= RTOL, f"{what}: lockstep's re-save loads in Keras and predicts output {k} the same (rel {e:.2e})")


def padded_tokens(seed, n=24):
    rng = np.random.RandomState(seed)
    x = rng.randint(1, VOCAB, (n, STEPS)).astype(np.float32)
    for row in range(n):
        kind = row % 4
        if kind == 1:
            x[row, STEPS - 1 - row % (STEPS - 1):] = 0  # at the end
        elif kind == 2:
            x[row, :1 + row % (STEPS - 2)] = 0  # at the start
        elif kind == 3:
            x[row, 2:4] = 0  # in the middle
    return x


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, cli, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    x = padded_tokens(0)
    seq = keras_sequential()
    both_ways(seq, x, d, cli, driver, "(a) Sequential Embedding(mask_zero) -> every recurrent layer")
    both_ways(keras_functional(), x, d, cli, driver, "(a) Functional: the NotEqual mask node into each layer")
    for functional in (False, True):
        both_ways(keras_bidirectional(functional), x, d, cli, driver,
                  f"(a) {'Functional' if functional else 'Sequential'} Bidirectional: each merge mode, "
                  "return_sequences, a given backward layer, masks")
    steps = np.random.RandomState(6).normal(0, 1, (16, STEPS, 3)).astype(np.float32)
    for row in range(16):
        steps[row, STEPS - row % (STEPS - 1):] = 0
    steps[::3, 1] = 0
    both_ways(keras_masking(), steps, d, cli, driver, "(a) Masking -> LSTM(zero_output_for_mask) -> SimpleRNN(go_backwards)")

    # (b) Keras' save_weights file into lockstep's copy of the model (zeroed first by the driver).
    weights = os.path.join(d, f"{seq.name}.weights.h5")
    seq.save_weights(weights)
    out = os.path.join(d, f"{seq.name}_w_pred.npy")
    r = run(driver, "load-weights", os.path.join(d, f"{seq.name}.keras"), weights, os.path.join(d, f"{seq.name}_x.npy"),
            out)
    e = rel(np.load(out), seq.predict(x, verbose=0)) if r.returncode == 0 else float("inf")
    failed = f": {r.stderr.strip()}" if r.returncode != 0 else ""
    check(e <= RTOL, f"(b) Keras' .weights.h5 loads in lockstep (rel {e:.2e}){failed}")

    # (c) A model lockstep trained and saved, in Keras.
    xt, yt = os.path.join(d, "train_x.npy"), os.path.join(d, "train_y.npy")
    tokens = padded_tokens(7, 64)
    np.save(xt, tokens)
    np.save(yt, (tokens == 1).any(axis=1).astype(np.int64) + (tokens == 2).any(axis=1).astype(np.int64))
    path = os.path.join(d, "lockstep_rnn.keras")
    r = run(driver, "train", "rnn", path, xt, yt)
    if r.returncode != 0:
        check(False, f"(c) keras_files_driver train rnn: {r.stderr.strip()}")
    else:
        got = lockstep_predict(cli, path, x, d, "lockstep_rnn")
        want = keras.saving.load_model(path).predict(x, verbose=0)
        e = rel(got, want) if got is not None else float("inf")
        check(e <= RTOL, f"(c) lockstep's trained recurrent model loads in Keras and predicts the same (rel {e:.2e})")

    # (d) Calls of several tensors: return_state, initial_state, return_attention_scores.
    rng = np.random.RandomState(14)
    multi_both_ways(keras_seq2seq(), [x, rng.normal(0, 1, (len(x), 5, 2)).astype(np.float32)], d, driver,
                    "(d) encoder-decoder: return_state, initial_state=[h, c] and [h]")
    multi_both_ways(keras_attention_scores(), [rng.normal(0, 1, (8, 4, 8)).astype(np.float32),
                                               rng.normal(0, 1, (8, 6, 8)).astype(np.float32)], d, driver,
                    "(d) MultiHeadAttention(return_attention_scores=True): the scores as an output")
    multi_both_ways(keras_unmerged_bidirectional(), [x], d, driver,
                    "(d) Bidirectional(merge_mode=None): both directions as outputs, masks, a second one's into a Dense")
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
