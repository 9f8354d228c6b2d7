"""Models written the way Keras' examples write attention: subclasses of keras.layers.Layer composing
built-in layers, keras.Model subclasses, models called on KerasTensors and KerasTensor arithmetic.
Each is traced into lockstep's functional model; each test asserts what the user relies on (it
computes what Keras computes, it learns, weights are shared, it saves) or that what cannot be traced
is refused by name."""
import os
import subprocess
import sys

import numpy as np
import pytest

import lockstep as tf
from lockstep import keras
from lockstep.keras import layers


def dense_outputs(model, x, names):
    """The outputs of the named Dense layers of `model` on x, computed in NumPy from their weights."""
    out = {}
    for name in names:
        kernel, bias = model.get_layer(name).get_weights()
        out[name] = x @ kernel + bias
    return out


# --- KerasTensor arithmetic ---

def test_keras_tensor_arithmetic_makes_keras_merge_layers_and_saves(tmp_path):
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(4,))
    a = layers.Dense(3, name="a")(inputs)
    b = layers.Dense(3, name="b")(inputs)
    outputs = [a + b, a - b, a * b, 2.0 * a, a - 1, 1 - a, 0.5 + a, -a]
    model = keras.Model(inputs, outputs)
    assert [layer.get_config()["name"] for layer in model.layers if layer._layer.class_name in
            ("Add", "Subtract", "Multiply")] == ["add", "subtract", "multiply"]
    assert sum(layer._layer.class_name == "Rescaling" for layer in model.layers) == 5
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    ref = dense_outputs(model, x, ["a", "b"])
    ra, rb = ref["a"], ref["b"]
    got = model.predict(x, verbose=0)
    for value, expected in zip(got, [ra + rb, ra - rb, ra * rb, 2 * ra, ra - 1, 1 - ra, 0.5 + ra, -ra]):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    model.save(str(tmp_path / "arithmetic.keras"))
    loaded = keras.models.load_model(str(tmp_path / "arithmetic.keras"))
    for value, again in zip(got, loaded.predict(x, verbose=0)):
        np.testing.assert_array_equal(value, again)


def test_keras_tensor_arithmetic_refuses_what_it_cannot_build_by_name():
    inputs = keras.Input(shape=(4,))
    a = layers.Dense(3)(inputs)
    with pytest.raises(TypeError, match="KerasTensor \\+ ndarray"):
        a + np.ones(3, np.float32)  # noqa: B018
    with pytest.raises(ValueError, match="shape"):
        a + inputs  # noqa: B018 (no broadcasting, as Keras' Add)
    with pytest.raises(TypeError, match="data-dependent Python control flow"):
        bool(a)
    with pytest.raises(TypeError, match="does not support / on a KerasTensor yet: multiply by the reciprocal"):
        a / 2  # noqa: B018
    with pytest.raises(TypeError, match="does not support indexing"):
        a[:, 0]  # noqa: B018
    with pytest.raises(TypeError, match="cannot make it a NumPy array"):
        np.asarray(a)


# --- Models called on KerasTensors ---

def test_a_sequential_called_on_a_keras_tensor_runs_its_layers_with_their_weights():
    keras.utils.set_random_seed(2)
    ffn = keras.Sequential([layers.Dense(8, activation="relu"), layers.Dense(4)])
    inputs = keras.Input(shape=(4,))
    once = ffn(inputs)
    assert [layer.name for layer in ffn.layers] == ["dense", "dense_1"]  # the Sequential's names, until
    model = keras.Model(inputs, ffn(once))  # called twice: one set of weights
    assert len(model.weights) == 4 and model.count_params() == (4 * 8 + 8) + (8 * 4 + 4)
    k1, b1, k2, b2 = ffn.get_weights()
    x = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)

    def ffn_np(v):
        return np.maximum(v @ k1 + b1, 0) @ k2 + b2

    np.testing.assert_allclose(model.predict(x, verbose=0), ffn_np(ffn_np(x)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="shape"):
        ffn(keras.Input(shape=(5,)))  # built for 4 features


def test_a_functional_model_called_on_keras_tensors_shares_its_weights_and_structure():
    keras.utils.set_random_seed(3)
    a, b = keras.Input(shape=(3,), name="a"), keras.Input(shape=(3,), name="b")
    inner = keras.Model({"a": a, "b": b}, {"sum": layers.Dense(2)(a + b), "diff": layers.Dense(2)(a - b)})
    x = keras.Input(shape=(3,))
    out = inner({"a": x, "b": layers.Dense(3, name="proj")(x)})
    assert sorted(out) == ["diff", "sum"]
    outer = keras.Model(x, layers.Concatenate()([out["sum"], out["diff"]]))
    assert len(outer.weights) == 2 + 4  # proj's, then inner's two Dense layers' (not copies)
    values = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)

    def composed():
        projected = dense_outputs(outer, values, ["proj"])["proj"]
        inner_out = inner.predict({"a": values, "b": projected}, verbose=0)
        return np.concatenate([inner_out["sum"], inner_out["diff"]], axis=1)

    np.testing.assert_allclose(outer.predict(values, verbose=0), composed(), rtol=1e-5, atol=1e-6)
    inner.set_weights([w * 2 + 1 for w in inner.get_weights()])  # seen by the outer model: shared
    np.testing.assert_allclose(outer.predict(values, verbose=0), composed(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="takes inputs a, b"):
        inner({"a": x})


# --- Subclassed layers: Keras' text classification with Transformer (keras.io), shrunk ---

class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, training=None):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    """Keras' example adds pos_emb(ops.arange(maxlen)); lockstep's PositionEmbedding gives those rows."""

    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.PositionEmbedding(sequence_length=maxlen)

    def call(self, x):
        x = self.token_emb(x)
        return x + self.pos_emb(x)


MAXLEN, VOCAB, EMBED = 12, 40, 16


def token_data(n, seed):
    """Sequences of tokens 2..VOCAB-1; the label says whether token 1 appears (about half do)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(2, VOCAB, size=(n, MAXLEN))
    has = rng.random(n) < 0.5
    x[has, rng.integers(0, MAXLEN, size=has.sum())] = 1
    return x.astype(np.int32), has.astype(np.int32)


def text_classifier(block):
    inputs = layers.Input(shape=(MAXLEN,))
    x = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED)(inputs)
    x = block(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


@pytest.mark.parametrize("devices", [["cpu:0"], ["cpu:0", "cpu:1"]])
def test_keras_transformer_text_classification_learns_on_one_and_two_replicas(devices):
    x, y = token_data(1600, seed=5)
    x_val, y_val = token_data(400, seed=6)
    keras.utils.set_random_seed(7)
    with tf.distribute.MirroredStrategy(devices).scope():
        block = TransformerBlock(EMBED, num_heads=2, ff_dim=32)
        model = text_classifier(block)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=5, validation_data=(x_val, y_val), verbose=0)
    assert history.history["val_accuracy"][-1] > 0.9  # chance is about 0.5
    # The block's weights are its sublayers': attention's 8, two LayerNormalizations' and the ffn's 4 each.
    assert len(block.weights) == 8 + 2 + 2 + 4 and block.name == "transformer_block"
    assert sum(w.size for w in block.get_weights()) == (4 * EMBED * 2 * EMBED + 3 * 2 * EMBED + EMBED) \
        + 4 * EMBED + (EMBED * 32 + 32 + 32 * EMBED + EMBED)


def test_the_keras_example_program_runs_as_written_and_learns():
    """examples/python/transformer_text_classification.py: Keras' classes as written there."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                          "python", "transformer_text_classification.py")
    env = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}
    run = subprocess.run([sys.executable, script, "4800", "2"], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert float(run.stdout.strip().splitlines()[-1].split(":")[1]) > 0.9, run.stdout


def test_stacked_blocks_each_with_a_sequential_get_a_name_each():
    inputs = layers.Input(shape=(MAXLEN,))
    h = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED)(inputs)
    h = TransformerBlock(EMBED, num_heads=2, ff_dim=32)(TransformerBlock(EMBED, num_heads=2, ff_dim=32)(h))
    model = keras.Model(inputs, layers.Dense(2)(layers.GlobalAveragePooling1D()(h)))
    names = [layer.name for layer in model.layers]
    assert len(names) == len(set(names))  # each Sequential named its Dense layers dense and dense_1
    assert [n for n in names if n.startswith("dense")] == ["dense", "dense_1", "dense_2", "dense_3", "dense_4"]


def test_a_subclassed_layer_called_twice_shares_its_weights_and_saves_as_a_functional_model(tmp_path):
    keras.utils.set_random_seed(8)
    block = TransformerBlock(EMBED, num_heads=2, ff_dim=32)
    inputs = layers.Input(shape=(MAXLEN,))
    h = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED)(inputs)
    twice = keras.Model(inputs, layers.Dense(1)(layers.GlobalAveragePooling1D()(block(block(h)))))
    embedding = VOCAB * EMBED + MAXLEN * EMBED
    block_params = sum(w.size for w in block.get_weights())
    assert twice.count_params() == embedding + block_params + EMBED + 1  # the block counted once
    x, _ = token_data(8, seed=9)
    path = str(tmp_path / "twice.keras")
    twice.save(path)
    loaded = keras.models.load_model(path)  # lockstep's layers only: no custom_objects
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), twice.predict(x, verbose=0))
    before = block.get_weights()
    block.set_weights([w + 1 for w in before])
    assert not np.array_equal(twice.predict(x, verbose=0), loaded.predict(x, verbose=0))


def test_a_subclassed_layer_may_make_its_sublayers_in_build_and_holds_each_layer_once():
    class Residual(layers.Layer):
        def build(self, input_shape):
            self.dense = layers.Dense(input_shape[-1], name="inner")
            self.by_name = {"again": self.dense, "norm": [layers.LayerNormalization()]}

        def call(self, x):
            return self.by_name["norm"][0](x + self.dense(x))

    residual = Residual(name="residual")
    assert residual.weights == [] and not residual.built
    inputs = keras.Input(shape=(6,))
    model = keras.Model(inputs, residual(inputs))
    assert residual.built and [w.shape for w in residual.weights] == [(6, 6), (6,), (6,), (6,)]
    assert [w.shape for w in model.weights] == [(6, 6), (6,), (6,), (6,)]
    residual.set_weights([np.eye(6, dtype=np.float32), np.zeros(6), np.ones(6), np.zeros(6)])
    x = np.random.default_rng(4).normal(size=(3, 6)).astype(np.float32)
    doubled = 2 * x
    expected = (doubled - doubled.mean(1, keepdims=True)) / np.sqrt(doubled.var(1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_what_a_subclassed_layer_cannot_do_is_refused_by_name():
    class OwnWeights(layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 4))

        def call(self, x):
            return x

    class UsesOps(layers.Layer):
        def call(self, x):
            return tf.reduce_mean(x, axis=1)

    class Branches(layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(4)

        def call(self, x):
            return self.dense(x) if x else x

    class ReturnsNumbers(layers.Layer):
        def call(self, x):
            return 3

    class NoSuper(layers.Layer):
        def __init__(self):
            self.dense = layers.Dense(4)

        def call(self, x):
            return self.dense(x)

    inputs = keras.Input(shape=(4,))
    with pytest.raises(NotImplementedError, match="OwnWeights.add_weight .*compose built-in layers"):
        OwnWeights()(inputs)
    with pytest.raises(TypeError, match="tf / keras.ops functions cannot be traced"):
        UsesOps()(inputs)
    with pytest.raises(TypeError, match="data-dependent Python control flow"):
        Branches()(inputs)
    with pytest.raises(TypeError, match="ReturnsNumbers.call returned int"):
        ReturnsNumbers()(inputs)
    with pytest.raises(TypeError, match="must call super\\(\\).__init__"):
        NoSuper()(inputs)
    block = TransformerBlock(4, 1, 8)
    with pytest.raises(ValueError, match="training=True of TransformerBlock.__call__"):
        block(keras.Input(shape=(3, 4)), training=True)
    with pytest.raises(ValueError, match="mask= of TransformerBlock"):
        block(keras.Input(shape=(3, 4)), mask=inputs)
    with pytest.raises(NotImplementedError, match="calling TransformerBlock on ndarray"):
        block(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="Layer subclass \\(TransformerBlock\\) in keras.Sequential"):
        keras.Sequential([keras.Input(shape=(3, 4)), block])
    with pytest.raises(ValueError, match="dtype='mixed_float16'"):
        TransformerBlock(4, 1, 8, dtype="mixed_float16")
    with pytest.raises(TypeError, match="base class"):
        layers.Layer()


# --- Subclassed models ---

class Classifier(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(16, activation="relu")
        self.out = layers.Dense(2, activation="softmax")

    def call(self, inputs, training=None):
        return self.out(self.hidden(inputs))


def separable(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


def test_a_subclassed_model_is_traced_at_its_first_fit_and_then_is_a_functional_model(tmp_path):
    x, y = separable(800, seed=1)
    keras.utils.set_random_seed(4)
    with tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"]).scope():
        model = Classifier(name="classifier")
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    assert model.name == "classifier"
    with pytest.raises(ValueError, match="model 'classifier' \\(Classifier\\) is not built yet"):
        model.summary()
    model.fit(x, y, batch_size=32, epochs=10, verbose=0)
    _, accuracy = model.evaluate(*separable(400, seed=2), verbose=0)
    assert accuracy > 0.9
    lines = []
    model.summary(print_fn=lines.append)
    assert "Total params: 130" in lines[0]  # 5 * 16 + 16 + 16 * 2 + 2
    assert [layer.name for layer in model.layers] == ["input_layer", "dense", "dense_1"]
    probabilities = model.predict(x[:10], verbose=0)
    np.testing.assert_allclose(model(x[:10]).numpy(), probabilities, rtol=1e-5)
    model.save(str(tmp_path / "classifier.keras"))
    np.testing.assert_array_equal(keras.models.load_model(str(tmp_path / "classifier.keras")).predict(x[:10]),
                                  probabilities)


def test_a_subclassed_model_builds_from_build_predict_a_dataset_or_a_call():
    keras.utils.set_random_seed(5)
    built = Classifier()
    built.build((None, 5))
    assert built.output_shape == (None, 2) and built.count_params() == 130
    x, y = separable(64, seed=3)
    from_data = Classifier()
    assert from_data.predict(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), verbose=0).shape == (64, 2)
    called = Classifier()
    assert called(x[:3]).numpy().shape == (3, 2)
    # Called on a KerasTensor before it is built, its layers join the model being built.
    inputs = keras.Input(shape=(5,))
    outer = keras.Model(inputs, Classifier()(inputs))
    assert outer.count_params() == 130


def test_a_subclassed_model_whose_call_reads_values_is_refused_by_name():
    class Gated(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs) if inputs else inputs

    with pytest.raises(TypeError, match="data-dependent Python control flow"):
        Gated().fit(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0)
    class NoSuper(keras.Model):
        def __init__(self):
            self.dense = layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs)

    with pytest.raises(TypeError, match="NoSuper.__init__ must call super\\(\\).__init__\\(\\)"):
        NoSuper().predict(np.zeros((4, 3), np.float32), verbose=0)
    with pytest.raises(ValueError, match="keras.Model needs inputs and outputs"):
        keras.Model()
