#!/usr/bin/env python3
"""The ViT of `lockstep train --model vit` against the same model built in Keras (.venv-ref).

usage: keras_vit.py DIR LOCKSTEP_CLI

keras_hub is not in .venv-ref, so PositionEmbedding is keras_hub's layer written out here (same
config, weight and call) under keras_hub's registered name. (a) Keras builds the ViT of
docs/FEATURES.md with random weights: its parameter count is lockstep's (138,890) and `lockstep
predict` on its .keras file gives Keras' predictions (relative 1e-4). (b) lockstep builds and
saves its own ViT (one training step): Keras loads it, finds the same layers and parameter count,
and predicts what lockstep does (relative 1e-4).

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, lockstep_predict, np, keras  # noqa: E402

RTOL = 1e-4
PARAMS = 138890  # lockstep's applications::ViT() (tests/training/vit_test.cpp)


@keras.saving.register_keras_serializable(package="keras_hub")
class PositionEmbedding(keras.layers.Layer):
    """keras_hub.layers.PositionEmbedding (start_index 0)."""

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = int(sequence_length)
        self.initializer = keras.initializers.get(initializer)

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length,
                       "initializer": keras.initializers.serialize(self.initializer)})
        return config

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(name="embeddings", shape=[self.sequence_length, inputs_shape[-1]],
                                                   initializer=self.initializer, trainable=True)

    def call(self, inputs):
        shape = keras.ops.shape(inputs)
        table = keras.ops.slice(self.position_embeddings, (0, 0), (shape[-2], shape[-1]))
        return keras.ops.broadcast_to(table, shape)

    def compute_output_shape(self, input_shape):
        return input_shape


def keras_vit(patch=4, dim=64, heads=4, depth=4, mlp=128, classes=10):
    keras.utils.set_random_seed(3)
    inp = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(dim, patch, strides=patch, padding="valid")(inp)
    tokens = (28 // patch) ** 2
    x = keras.layers.Reshape((tokens, dim))(x)
    x = keras.layers.Add()([x, PositionEmbedding(tokens)(x)])
    for _ in range(depth):
        y = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        y = keras.layers.MultiHeadAttention(heads, key_dim=dim // heads)(y, y)
        x = keras.layers.Add()([x, y])
        y = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        y = keras.layers.Dense(mlp, activation="gelu")(y)
        x = keras.layers.Add()([x, keras.layers.Dense(dim)(y)])
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x)
    x = keras.layers.Dropout(0.1)(keras.layers.GlobalAveragePooling1D()(x))
    out = keras.layers.Dense(classes, activation="softmax")(x)
    model = keras.Model(inp, out, name="keras_vit")
    rng = np.random.RandomState(1)  # non-zero biases and LayerNormalization parameters matter too
    for w in model.weights:
        if len(w.shape) == 1:
            w.assign(rng.normal(0, 0.3, w.shape).astype(np.float32) + (1.0 if w.path.endswith("gamma") else 0.0))
    return model


def classes(model):
    return sorted(l.__class__.__name__ for l in model.layers)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    d, cli = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    x = np.random.RandomState(0).uniform(0, 1, (16, 28, 28, 1)).astype(np.float32)

    # (a) Keras' ViT in lockstep.
    model = keras_vit()
    check(model.count_params() == PARAMS, f"Keras' ViT has lockstep's parameter count ({model.count_params()})")
    path = os.path.join(d, "keras_vit.keras")
    model.save(path)
    want = model.predict(x, verbose=0)
    got = lockstep_predict(cli, path, x, d, "keras_vit")
    if got is not None:
        e = rel(got, want)
        check(got.shape == want.shape and e <= RTOL, f"lockstep predicts Keras' ViT's outputs (rel {e:.2e})")

    # (b) lockstep's ViT in Keras.
    ours = os.path.join(d, "lockstep_vit.keras")
    r = run(cli, "train", "--model", "vit", "--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "16",
            "--verbose", "0", "--no-tensorboard", "--logdir", os.path.join(d, "run"), "--save-model", ours)
    if r.returncode != 0:
        check(False, f"lockstep train --model vit: exit {r.returncode}: {r.stderr.strip()}")
    else:
        back = keras.saving.load_model(ours)
        check(back.count_params() == PARAMS, f"lockstep's ViT loads in Keras with {back.count_params()} parameters")
        check(classes(back) == classes(model), "lockstep's ViT has the layers of Keras' ViT")
        got = lockstep_predict(cli, ours, x, d, "lockstep_vit")
        if got is not None:
            e = rel(back.predict(x, verbose=0), got)
            check(e <= RTOL, f"Keras predicts what lockstep does with lockstep's ViT (rel {e:.2e})")
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
