#!/usr/bin/env python3
"""Issue 40's layers both ways against real Keras (TF backend, .venv-ref).

usage: keras_layers.py DIR LOCKSTEP_CLI KERAS_FILES_DRIVER

Keras builds a Functional model using every new layer (Embedding, Dense on a sequence with gelu
and silu, Permute, Softmax on an inner axis, GlobalAveragePooling1D, RepeatVector, Concatenate,
Multiply, Subtract, Average, Maximum, Minimum, Dot, a silu Activation) with random weights and
saves it. `lockstep predict` on that file gives Keras' predictions (relative
1e-4); Keras' save_weights file loads into lockstep's copy; lockstep's re-save loads back in Keras
and predicts the same. The same for a sequence convnet (Conv1D of every padding, strides,
dilation and groups; MaxPooling1D, AveragePooling1D, GlobalMaxPooling2D, GlobalMaxPooling1D; the
text classifier of keras.io's "Text classification from scratch"), and for Embedding(mask_zero)
before Conv1D and GlobalMaxPooling1D, which ignore the mask as Keras 3's do, and before
MultiHeadAttention (self-attention, and causal with a key), which takes it. Keras 3's other masks:
Masking (Sequential, and Functional with its not_equal / any mask nodes), Concatenate's masks
(along the features and the steps, its mask op nodes), Softmax(x, mask=m) (a second input), and
Embedding(mask_zero) -> Softmax, which Keras and lockstep both refuse at predict. Keras 3's other
activations, its advanced activation layers (ReLU, LeakyReLU, ELU, PReLU) and SeparableConv2D. The
decoder side: keras.io's denoising autoencoder, a U-Net-like model (Conv2DTranspose, UpSampling2D
nearest and bilinear, Cropping2D), UpSampling1D and ZeroPadding1D. Keras 3's other regularization
layers (SpatialDropout1D / 2D in both data formats, GaussianNoise, GaussianDropout, AlphaDropout with
a noise_shape, Identity) and GroupNormalization / UnitNormalization, trained a few steps in Keras.
Keras 3's preprocessing layers in a model: Normalization adapted by Keras (per channel of images, per
feature, over everything with axis=None, inverted) and given mean and variance, with RandomFlip (the
identity in predict); the adapted statistics are Keras' weights (its int64 count included) both ways;
Resizing (bilinear and nearest, down and up, crop_to_aspect_ratio) and CenterCrop; Resizing and
UpSampling2D with bicubic, lanczos3, lanczos5 and area, Resizing with antialias and
pad_to_aspect_ratio. RandomContrast and RandomBrightness (the
identity in predict; factor, value_range and seed both ways) and SpatialDropout3D in both data formats.
RandomTranslation, RandomRotation and RandomZoom (the identity in predict; factors, fill_mode,
interpolation, fill_value and seed both ways), and affine_transform against
keras.ops.image.affine_transform for given transforms. Keras' seed on the regularization layers and
the recurrent layers' dropout, Dropout's noise_shape and RandomCrop (on images of its size, where
Keras 3.15.1's inference and lockstep's agree), their configurations both ways.

Exit 0 all agree, 1 a disagreement, 77 (skip) when tensorflow/keras are not importable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402  (skips with 77 itself when Keras is missing)
from keras_files import check, rel, run, np, keras  # noqa: E402

RTOL = 1e-4
VOCAB, STEPS = 13, 6


def keras_model():
    keras.utils.set_random_seed(5)
    inp = keras.Input((STEPS,))
    x = keras.layers.Embedding(VOCAB, 8)(inp)
    x = keras.layers.Dense(8, activation="gelu")(x)
    x = keras.layers.Permute((2, 1))(x)
    x = keras.layers.Softmax(axis=1)(x)
    x = keras.layers.Permute((2, 1))(x)
    x = keras.layers.Activation("silu")(x)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    a = keras.layers.Dense(5, activation="silu")(pooled)
    b = keras.layers.Dense(5, activation="swish")(pooled)
    merged = [keras.layers.Multiply()([a, b]), keras.layers.Subtract()([a, b]), keras.layers.Average()([a, b]),
              keras.layers.Maximum()([a, b]), keras.layers.Minimum()([a, b]),
              keras.layers.Dot(axes=1, normalize=True)([a, b])]
    cat = keras.layers.Concatenate()(merged)
    seq = keras.layers.RepeatVector(3)(cat)
    seq = keras.layers.Dot(axes=2)([seq, seq])
    flat = keras.layers.Flatten()(seq)
    out = keras.layers.Dense(4, activation="softmax")(keras.layers.Concatenate(axis=-1)([flat, cat]))
    model = keras.Model(inp, out, name="keras_sequence")
    # Random non-zero biases and a table far from its +-0.05 start, so that every weight matters.
    rng = np.random.RandomState(1)
    for w in model.weights:
        if w.path.endswith("bias") or w.path.endswith("embeddings"):
            w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masked_model():
    """Embedding(mask_zero) -> Dense -> GlobalAveragePooling1D: the mask leaves padding out. A
    Sequential (keras_masked_functional is the Functional one)."""
    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((STEPS,)), keras.layers.Embedding(VOCAB, 4, mask_zero=True),
                              keras.layers.Dense(4, activation="gelu"), keras.layers.GlobalAveragePooling1D(),
                              keras.layers.Dense(3, activation="softmax")], name="keras_masked")
    rng = np.random.RandomState(2)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masked_functional():
    """The same as a Functional model: Keras writes the mask as a NotEqual node handed to
    GlobalAveragePooling1D as its mask keyword; lockstep reads it as the Embedding's mask."""
    keras.utils.set_random_seed(6)
    inp = keras.Input((STEPS,))
    x = keras.layers.Embedding(VOCAB, 4, mask_zero=True)(inp)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Dense(4, activation="gelu")(x))
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(x), name="keras_masked_functional")
    rng = np.random.RandomState(2)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masked_attention():
    """Embedding(mask_zero) -> MultiHeadAttention(x, x) -> LayerNormalization ->
    MultiHeadAttention(query, value, key, use_causal_mask=True) on a second Embedding(mask_zero)
    -> GlobalAveragePooling1D: each attention takes its inputs' masks as its query's, value's and
    key's (Keras' _compute_attention_mask) and passes on the query's. Each tensor is read by one
    attention only: Keras' call also deletes its inputs' masks, so a later reader of the same
    tensor would see none (lockstep keeps them)."""
    keras.utils.set_random_seed(10)
    inp = keras.Input((STEPS,))
    x = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(inp)
    a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    n = keras.layers.LayerNormalization()(a)
    v = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(inp)
    c = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5)(n, v, v, use_causal_mask=True)
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.GlobalAveragePooling1D()(c))
    model = keras.Model(inp, out, name="keras_masked_attention")
    rng = np.random.RandomState(8)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_sequence_convnet():
    """Every sequence convnet layer, on an Embedding's output."""
    keras.utils.set_random_seed(7)
    inp = keras.Input((STEPS * 2,))
    x = keras.layers.Embedding(VOCAB, 6)(inp)
    x = keras.layers.Conv1D(6, 3, padding="causal", dilation_rate=2, activation="relu")(x)
    x = keras.layers.MaxPooling1D(2, strides=1, padding="same")(x)
    x = keras.layers.Conv1D(8, 3, strides=2, padding="same", groups=2)(x)
    x = keras.layers.AveragePooling1D(2, padding="same")(x)
    a = keras.layers.Conv1D(4, 2, activation="tanh", use_bias=False)(x)
    image = keras.layers.Reshape((3, 2, 4))(x)
    b = keras.layers.GlobalMaxPooling2D()(image)
    c = keras.layers.GlobalMaxPooling1D(keepdims=True)(a)
    merged = keras.layers.Concatenate()([keras.layers.Flatten()(c), b, keras.layers.GlobalMaxPooling1D()(x)])
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(merged), name="keras_seqconv")
    rng = np.random.RandomState(4)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_text_classifier():
    """keras.io's "Text classification from scratch" model (smaller vocabulary and sequences)."""
    keras.utils.set_random_seed(8)
    inputs = keras.Input(shape=(40,), dtype="int64")
    x = keras.layers.Embedding(VOCAB, 16)(inputs)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Conv1D(16, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.Conv1D(16, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dense(16, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    predictions = keras.layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions, name="keras_text_classifier")
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model


def keras_masked_convnet():
    """Embedding(mask_zero) -> Conv1D -> GlobalMaxPooling1D: Keras 3 drops the mask at Conv1D (a warning)."""
    keras.utils.set_random_seed(9)
    model = keras.Sequential([keras.Input((STEPS,)), keras.layers.Embedding(VOCAB, 4, mask_zero=True),
                              keras.layers.Conv1D(4, 2, padding="same"), keras.layers.GlobalMaxPooling1D(),
                              keras.layers.Dense(3, activation="softmax")], name="keras_masked_convnet")
    rng = np.random.RandomState(5)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masked_merges():
    """Keras 3's element-wise merge masks (base_merge.py): Add of two masked tensors keeps the steps
    either keeps (Keras writes that mask as a LogicalOr node, handed to GlobalAveragePooling1D), and
    Add of a masked and an unmasked one (token plus position embeddings) has no mask: every step
    counts in the average after it."""
    keras.utils.set_random_seed(11)
    inp = keras.Input((STEPS,))
    e = keras.layers.Embedding(VOCAB, 4, mask_zero=True)(inp)
    both = keras.layers.Add()([e, keras.layers.Dense(4)(e)])
    unmasked = keras.layers.Add()([both, keras.layers.Embedding(VOCAB, 4)(inp)])
    pooled = keras.layers.Concatenate()([keras.layers.GlobalAveragePooling1D()(both),
                                         keras.layers.GlobalAveragePooling1D()(unmasked)])
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(pooled), name="keras_masked_merges")
    rng = np.random.RandomState(9)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masking_model():
    """Masking(0.0) -> Dense -> GlobalAveragePooling1D on float steps, a Sequential: the steps whose
    features are all 0 are left out of the average."""
    keras.utils.set_random_seed(12)
    model = keras.Sequential([keras.Input((STEPS, 3)), keras.layers.Masking(), keras.layers.Dense(4, activation="gelu"),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3, activation="softmax")],
                             name="keras_masking")
    rng = np.random.RandomState(10)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masking_functional():
    """Masking(mask_value=0.5) in a Functional model: Keras writes its mask as not_equal(x, 0.5) and
    any(axis=-1) nodes handed to GlobalAveragePooling1D; one branch pools the Dense after it, the
    other the Masking's own (zeroed) output."""
    keras.utils.set_random_seed(13)
    inp = keras.Input((STEPS, 3))
    masked = keras.layers.Masking(mask_value=0.5)(inp)
    a = keras.layers.GlobalAveragePooling1D()(keras.layers.Dense(4, activation="tanh")(masked))
    b = keras.layers.GlobalAveragePooling1D()(masked)
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Concatenate()([a, b]))
    model = keras.Model(inp, out, name="keras_masking_functional")
    rng = np.random.RandomState(11)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_masked_concatenate():
    """Concatenate's masks (Keras 3's concatenate.py): along the features of a masked and an unmasked
    Embedding (every step kept), of two masked ones (the steps either keeps: the padding, and token
    5 under a Masking), and along the steps (the masks joined). Keras writes them as not_equal,
    expand_dims, zeros_like, logical_or, ones_like, concatenate and any nodes handed to each
    GlobalAveragePooling1D."""
    keras.utils.set_random_seed(14)
    inp = keras.Input((STEPS,))
    e1 = keras.layers.Embedding(VOCAB, 3, mask_zero=True)(inp)
    e2 = keras.layers.Embedding(VOCAB, 2)(inp)
    # A mask elsewhere: Masking after an embedding whose row for token 5 is zeros (set below).
    e3 = keras.layers.Masking()(keras.layers.Embedding(VOCAB, 3, name="zero_five")(inp))
    pools = [keras.layers.GlobalAveragePooling1D()(keras.layers.Concatenate()([e1, e2])),
             keras.layers.GlobalAveragePooling1D()(keras.layers.Concatenate()([e1, e3])),
             keras.layers.GlobalAveragePooling1D()(keras.layers.Concatenate(axis=1)([e1, e3]))]
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Concatenate()(pools))
    model = keras.Model(inp, out, name="keras_masked_concatenate")
    rng = np.random.RandomState(12)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    table = model.get_layer("zero_five").embeddings
    table.assign(np.where(np.arange(VOCAB)[:, None] == 5, 0.0, table.numpy()).astype(np.float32))
    return model


def keras_masked_softmax():
    """Softmax(scores, mask=m) with m a second input (floats: Keras keeps what is above 0.5), then a
    Dense: Keras writes the mask keyword as that input's tensor."""
    keras.utils.set_random_seed(15)
    scores, mask = keras.Input((STEPS,), name="scores"), keras.Input((STEPS,), name="mask")
    s = keras.layers.Softmax()(keras.layers.Dense(STEPS)(scores), mask=mask)
    model = keras.Model([scores, mask], keras.layers.Dense(3, name="out")(s), name="keras_masked_softmax")
    rng = np.random.RandomState(13)
    for w in model.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def masked_softmax_both_ways(d, driver):
    """keras_masked_softmax's file predicts the same in lockstep (two inputs: keras_files_driver
    multi-predict), and lockstep's re-save in Keras."""
    model = keras_masked_softmax()
    rng = np.random.RandomState(14)
    x = rng.normal(0, 2, (16, STEPS)).astype(np.float32)
    m = rng.choice([0.0, 0.3, 0.7, 1.0], (16, STEPS)).astype(np.float32)
    m[3] = 0  # a row masked whole: all zeros out of the softmax
    want = model.predict([x, m], verbose=0)
    path = os.path.join(d, "keras_masked_softmax.keras")
    model.save(path)
    for name, a in (("scores", x), ("mask", m)):
        np.save(os.path.join(d, f"softmax_{name}.npy"), a)
    for tag, file in (("keras", path), ("resaved", os.path.join(d, "keras_masked_softmax_resaved.keras"))):
        if tag == "resaved":
            r = run(driver, "resave", path, file)
            if r.returncode != 0:
                check(False, f"Softmax(mask=m): resave: {r.stderr.strip()}")
                return
            e = rel(keras.saving.load_model(file).predict([x, m], verbose=0), want)
            check(e <= RTOL, f"Softmax(mask=m): lockstep's re-save loads in Keras and predicts the same (rel {e:.2e})")
        prefix = os.path.join(d, f"softmax_{tag}_")
        r = run(driver, "multi-predict", file, os.path.join(d, "softmax_scores.npy"), os.path.join(d, "softmax_mask.npy"),
                prefix)
        if r.returncode != 0:
            check(False, f"Softmax(mask=m) ({tag} file): lockstep multi-predict: {r.stderr.strip()}")
            continue
        e = rel(np.load(prefix + "out.npy"), want)
        check(e <= RTOL, f"Softmax(mask=m) ({tag} file): lockstep predicts Keras' outputs (rel {e:.2e})")


def embedding_mask_into_softmax(x, d, cli):
    """Embedding(mask_zero) -> Softmax: Keras passes the [batch, steps] mask to the softmax of the
    [batch, steps, features] embeddings and refuses it at predict; lockstep refuses it alike."""
    model = keras.Sequential([keras.Input((STEPS,)), keras.layers.Embedding(VOCAB, 4, mask_zero=True),
                              keras.layers.Softmax()], name="keras_embedding_softmax")
    try:
        model.predict(x, verbose=0)
        check(False, "Embedding(mask_zero) -> Softmax: Keras predicts (expected its ValueError)")
    except ValueError as e:
        check("must be broadcastable" in str(e), f"Embedding(mask_zero) -> Softmax: Keras' error: {str(e)[:200]}")
    path = os.path.join(d, "keras_embedding_softmax.keras")
    model.save(path)
    xin, out = os.path.join(d, "embedding_softmax_x.npy"), os.path.join(d, "embedding_softmax_pred.npy")
    np.save(xin, x.astype(np.float32))
    r = run(cli, "predict", "--model", path, "--input", xin, "--output", out)
    check(r.returncode != 0 and "must be broadcastable" in r.stderr,
          f"Embedding(mask_zero) -> Softmax: lockstep refuses it as Keras does (exit {r.returncode}: "
          f"{r.stderr.strip()[:300]})")


KERAS3_ACTIVATIONS = ("elu", "selu", "leaky_relu", "relu6", "softplus", "softsign", "hard_sigmoid", "hard_silu",
                      "hard_swish", "exponential", "mish")


def keras_activations_model():
    """Keras 3's other activations (a Dense branch each) and its advanced activation layers (ReLU
    with every argument, LeakyReLU, ELU, PReLU with and without shared axes) after SeparableConv2D
    ("same" with a depth multiplier, strided "valid")."""
    keras.utils.set_random_seed(16)
    inp = keras.Input((8, 8, 3))
    x = keras.layers.SeparableConv2D(4, 3, padding="same", depth_multiplier=2, activation="elu")(inp)
    x = keras.layers.PReLU(shared_axes=[1, 2])(x)
    x = keras.layers.SeparableConv2D(5, (2, 3), strides=2, activation="mish")(x)
    x = keras.layers.ReLU(max_value=2.0, negative_slope=0.1, threshold=0.2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.LeakyReLU()(keras.layers.Dense(12)(x))
    x = keras.layers.ELU(alpha=0.7)(x)
    x = keras.layers.PReLU()(x)
    x = keras.layers.ReLU(6.0)(x)
    branches = [keras.layers.Dense(3, activation=a)(x) for a in KERAS3_ACTIVATIONS]
    # Every branch an output feature, so that each activation is compared, not a softmax of them.
    model = keras.Model(inp, keras.layers.Concatenate()(branches), name="keras_activations")
    rng = np.random.RandomState(17)
    for w in model.weights:
        if w.path.endswith("bias") or w.path.endswith("alpha"):
            w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return model


def keras_decoder_models():
    """The decoder side: keras.io's denoising autoencoder (scaled down), a U-Net-like Functional
    model (UpSampling2D nearest and bilinear, on 32 channels as a U-Net decoder's, Cropping2D,
    Concatenate, Conv2DTranspose with strides, output_padding, dilation, no bias), and the sequence
    ones (UpSampling1D, ZeroPadding1D)."""
    keras.utils.set_random_seed(11)
    L = keras.layers
    autoencoder = keras.Sequential(
        [keras.Input((12, 12, 1)), L.Conv2D(8, 3, activation="relu", padding="same"), L.MaxPooling2D(2, padding="same"),
         L.Conv2DTranspose(8, 3, strides=2, activation="relu", padding="same"),
         L.Conv2D(1, 3, activation="sigmoid", padding="same")], name="keras_autoencoder")
    inp = keras.Input((10, 10, 3))
    c1 = L.Conv2D(4, 3, activation="relu")(inp)  # 8x8
    b = L.Conv2D(32, 3, padding="same")(L.MaxPooling2D(2)(c1))  # 4x4, 32 channels: bilinear's one pass
    merged = L.Concatenate()([c1, L.UpSampling2D(2)(b), L.UpSampling2D((2, 2), interpolation="bilinear")(b),
                              L.Cropping2D(((1, 1), (2, 0)))(inp)])
    y = L.Conv2DTranspose(3, (2, 3), strides=(3, 2), output_padding=(1, 0), activation="tanh")(merged)
    y = L.Conv2DTranspose(2, 3, strides=2, padding="same", output_padding=1)(y)
    y = L.Conv2DTranspose(2, (3, 2), padding="same", dilation_rate=2, use_bias=False)(y)
    y = L.UpSampling2D((1, 3), interpolation="bilinear")(L.Cropping2D(3)(y))
    unet = keras.Model(inp, y, name="keras_unet")
    seq_in = keras.Input((6, 3))
    s = L.ZeroPadding1D((1, 2))(L.UpSampling1D(3)(seq_in))
    sequence = keras.Model(seq_in, L.Conv1D(4, 3)(s), name="keras_upsampling1d")
    rng = np.random.RandomState(2)
    for model in (autoencoder, unet, sequence):
        for w in model.weights:
            if w.path.endswith("bias"):
                w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return autoencoder, unet, sequence


def keras_regularization_models():
    """Keras 3's other regularization layers and normalisations, trained two epochs in Keras (the
    dropouts and noise act there; the files keep Keras' "training": false on their calls) with
    random gammas, betas and biases: the identity in predict, the normalisations Keras'. A sequence
    model (GroupNormalization over the last axis, groups=-1 without beta, UnitNormalization over a
    list of axes) and a channels-first image one (SpatialDropout2D both ways, GroupNormalization on
    axis 1 without gamma)."""
    keras.utils.set_random_seed(19)
    L = keras.layers
    inp = keras.Input((6, 8))
    x = L.GaussianNoise(0.2)(L.SpatialDropout1D(0.3)(inp))
    x = L.GroupNormalization(groups=4)(x)
    x = L.GaussianDropout(0.3)(L.Dense(6, activation="selu")(x))
    x = L.AlphaDropout(0.2, noise_shape=(None, 1, 6))(x)
    x = L.GroupNormalization(groups=-1, epsilon=1e-2, center=False)(x)
    x = L.UnitNormalization(axis=[1, 2])(L.Identity()(x))
    sequence = keras.Model(inp, L.Dense(3, activation="softmax")(L.Flatten()(x)), name="keras_regularization_sequence")
    image_in = keras.Input((4, 5, 5))
    y = L.SpatialDropout2D(0.3, data_format="channels_first")(image_in)
    y = L.GroupNormalization(groups=2, axis=1, scale=False)(y)
    y = L.SpatialDropout2D(0.2)(L.Permute((2, 3, 1))(y))
    y = L.UnitNormalization()(y)
    images = keras.Model(image_in, L.Dense(2)(L.Flatten()(y)), name="keras_regularization_images")
    rng = np.random.RandomState(19)
    for model, shape in ((sequence, (32, 6, 8)), (images, (32, 4, 5, 5))):
        model.compile(optimizer="adam", loss="mse")
        target = rng.uniform(0, 1, (32,) + tuple(model.output.shape[1:])).astype(np.float32)
        model.fit(rng.normal(0, 1, shape).astype(np.float32), target, epochs=2, batch_size=8, verbose=0)
        for w in model.weights:
            if w.path.endswith(("gamma", "beta", "bias")):
                w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    return sequence, images


def keras_resize_model():
    """Every interpolation of tf.image.resize that Keras 3 names, down and up, non-square: Resizing
    bicubic (and cropped to the aspect ratio), lanczos5 then lanczos3, area after UpSampling2D's
    lanczos3, bicubic and lanczos5, antialiased shrinks, padded to the aspect ratio, behind a 1x1
    convolution; Flatten sees every pixel."""
    keras.utils.set_random_seed(22)
    L = keras.layers
    inp = keras.Input((7, 6, 3))
    x = L.Conv2D(3, 1, activation="tanh")(inp)
    x = L.Concatenate()([
        L.Resizing(5, 4, interpolation="bicubic")(x),
        L.Resizing(5, 4, interpolation="bicubic", crop_to_aspect_ratio=True)(x),
        L.Resizing(5, 4, interpolation="lanczos3")(L.Resizing(11, 3, interpolation="lanczos5")(x)),
        L.Resizing(5, 4, interpolation="area")(L.UpSampling2D((2, 2), interpolation="lanczos3")(x)),
        L.Resizing(5, 4, interpolation="area")(L.UpSampling2D((1, 3), interpolation="bicubic")(x)),
        L.Resizing(5, 4, interpolation="bilinear")(L.UpSampling2D((3, 2), interpolation="lanczos5")(x)),
        # antialias (a shrinking kernel widened) and pad_to_aspect_ratio with a fill_value.
        L.Resizing(5, 4, interpolation="bilinear", antialias=True)(L.Resizing(3, 2, antialias=True)(x)),
        L.Resizing(5, 4, interpolation="bicubic", antialias=True)(
            L.Resizing(2, 5, interpolation="lanczos3", antialias=True)(x)),
        L.Resizing(5, 4, interpolation="area")(
            L.Resizing(4, 8, interpolation="lanczos5", antialias=True, pad_to_aspect_ratio=True, fill_value=0.5)(x)),
        L.Resizing(5, 4, pad_to_aspect_ratio=True, fill_value=-0.25)(x),
        L.Resizing(5, 4, interpolation="nearest")(L.Resizing(8, 2, "nearest", pad_to_aspect_ratio=True)(x))])
    return keras.Model(inp, L.Dense(2)(L.Flatten()(x)), name="keras_resize")


def keras_preprocessing_models(images, table):
    """keras.io's image-classification front (Normalization adapted on the images, RandomFlip)
    and a tabular model with every Normalization form: adapted per feature, adapted with
    axis=None, given mean and variance (constants, no weights), and inverted."""
    keras.utils.set_random_seed(12)
    L = keras.layers
    norm = L.Normalization()
    norm.adapt(images)
    inp = keras.Input(images.shape[1:])
    x = L.RandomFlip("horizontal", seed=3)(norm(inp))
    x = L.RandomFlip()(x)
    x = L.Concatenate()([L.Resizing(4, 4)(x), L.Resizing(4, 4, interpolation="nearest")(x),
                         L.Resizing(4, 4, crop_to_aspect_ratio=True)(x), L.CenterCrop(4, 4)(x),
                         L.Resizing(4, 4)(L.Resizing(9, 7)(x))])
    x = L.GlobalAveragePooling2D()(L.Conv2D(4, 3, activation="relu")(x))
    image_model = keras.Model(inp, L.Dense(2)(x), name="keras_augment")
    per_feature, everything, inverted = L.Normalization(), L.Normalization(axis=None), L.Normalization(invert=True)
    for layer in (per_feature, everything, inverted):
        layer.adapt(table)
    given = L.Normalization(mean=[1.0, -2.0, 0.5, 3.0], variance=[4.0, 0.25, 1.0, 0.0])
    tin = keras.Input(table.shape[1:])
    merged = L.Concatenate()([per_feature(tin), everything(tin), given(tin), inverted(L.Dense(4)(tin))])
    tabular = keras.Model(tin, L.Dense(3)(merged), name="keras_normalization")
    return image_model, tabular


def keras_random_colour_models():
    """RandomContrast (Keras' number factor and a pair, a seed) and RandomBrightness before a
    convolution, and SpatialDropout3D in both data formats on volumes: random only in training, so
    predict is the identity through them; their configurations go both ways."""
    keras.utils.set_random_seed(23)
    L = keras.layers
    inp = keras.Input((6, 5, 3))
    x = L.RandomContrast(0.3, value_range=(0, 1), seed=5, name="contrast")(inp)
    x = L.RandomContrast((0.2, 0.4), name="contrast_pair")(x)
    x = L.RandomBrightness((-0.1, 0.2), value_range=(1, 0), name="brightness")(x)
    x = L.RandomBrightness(0.25, seed=9, name="brightness_number")(x)
    x = L.GlobalAveragePooling2D()(L.Conv2D(4, 3, activation="relu")(x))
    colour = keras.Model(inp, L.Dense(2)(x), name="keras_random_colour")
    vin = keras.Input((3, 4, 4, 2))
    v = L.SpatialDropout3D(0.3)(vin)
    v = L.SpatialDropout3D(0.2, data_format="channels_first")(v)
    volumes = keras.Model(vin, L.Dense(2)(L.Flatten()(v)), name="keras_spatial_dropout_3d")
    return colour, volumes


def keras_random_affine_model():
    """RandomTranslation, RandomRotation and RandomZoom with each fill mode and interpolation, a
    seed, factor numbers and pairs, RandomZoom with and without a width_factor: the identity in
    predict; their configurations go both ways."""
    keras.utils.set_random_seed(26)
    L = keras.layers
    inp = keras.Input((6, 5, 3))
    x = L.RandomTranslation(0.2, (-0.1, 0.3), seed=5, name="translation")(inp)
    x = L.RandomTranslation((0.1, -0.2), 0.1, fill_mode="constant", fill_value=0.5, interpolation="nearest",
                            name="translation_constant")(x)
    x = L.RandomRotation(0.1, fill_mode="wrap", seed=7, name="rotation")(x)
    x = L.RandomRotation((-0.2, 0.3), fill_mode="nearest", name="rotation_pair")(x)
    x = L.RandomZoom(0.2, name="zoom")(x)
    x = L.RandomZoom((-0.3, 0.1), (0.2, 0.4), interpolation="nearest", seed=3, name="zoom_both")(x)
    x = L.GlobalAveragePooling2D()(L.Conv2D(4, 3, activation="relu")(x))
    return keras.Model(inp, L.Dense(2)(x), name="keras_random_affine")


def keras_seeded_models():
    """Keras' seed on Dropout (with a noise_shape), SpatialDropout1D, GaussianNoise, GaussianDropout,
    AlphaDropout and LSTM / GRU dropout, trained a step in Keras; RandomCrop with a seed and without
    (Keras then writes a seed of its own) on images of its target size: the identity in predict."""
    keras.utils.set_random_seed(29)
    L = keras.layers
    inp = keras.Input((5, 4))
    x = L.Dropout(0.5, noise_shape=(None, 1, 4), seed=3, name="dropout_noise")(inp)
    x = L.SpatialDropout1D(0.2, seed=1, name="spatial")(x)
    x = L.LSTM(4, dropout=0.2, recurrent_dropout=0.1, seed=5, return_sequences=True, name="lstm")(x)
    x = L.GaussianNoise(0.1, seed=4, name="noise")(x)
    x = L.GRU(3, dropout=0.1, seed=6, return_sequences=True, name="gru")(x)
    x = L.GaussianDropout(0.2, seed=2, name="gaussian_dropout")(x)
    x = L.AlphaDropout(0.1, seed=8, name="alpha")(L.Flatten()(x))
    sequence = keras.Model(inp, L.Dense(2)(L.Dropout(0.3, name="dropout")(x)), name="keras_seeded_sequence")
    sequence.compile(optimizer="adam", loss="mse")
    rng = np.random.RandomState(29)
    sequence.fit(rng.normal(0, 1, (16, 5, 4)).astype(np.float32), rng.normal(0, 1, (16, 2)).astype(np.float32),
                 epochs=1, batch_size=8, verbose=0)
    iin = keras.Input((6, 5, 3))
    y = L.RandomCrop(6, 5, seed=7, name="crop_seeded")(iin)
    y = L.RandomCrop(6, 5, name="crop")(y)
    images = keras.Model(iin, L.Dense(2)(L.GlobalAveragePooling2D()(y)), name="keras_random_crop")
    return sequence, images


def check_seeded(d, cli, driver):
    sequence, images = keras_seeded_models()
    back = both_ways(sequence, np.random.RandomState(30).normal(0, 1, (8, 5, 4)).astype(np.float32), d, cli, driver,
                     "seeded Dropout (noise_shape), SpatialDropout1D, GaussianNoise, GaussianDropout, AlphaDropout, "
                     "LSTM and GRU dropout (identity in predict)")
    if back is not None:
        for layer in sequence.layers[1:]:
            want, got = layer.get_config(), back.get_layer(layer.name).get_config()
            exact = [k for k in ("seed", "noise_shape") if k in want]
            rates = [k for k in ("rate", "stddev", "dropout", "recurrent_dropout") if k in want]  # float32 in lockstep
            check(all(want[k] == got.get(k) for k in exact) and all(np.isclose(want[k], got[k]) for k in rates),
                  f"{layer.name}: {exact + rates} as Keras wrote them ({got} for {want})")
    back = both_ways(images, np.random.RandomState(31).uniform(0, 1, (8, 6, 5, 3)).astype(np.float32), d, cli,
                     driver, "RandomCrop with a seed and Keras' own (identity in predict at its size)")
    if back is not None:
        for name in ("crop_seeded", "crop"):
            want, got = images.get_layer(name).get_config(), back.get_layer(name).get_config()
            check(sorted(want) == sorted(got) and all(want[k] == got[k] for k in
                                                      ("height", "width", "seed", "data_format")),
                  f"{name}: RandomCrop's config as Keras wrote it ({got} for {want})")


AFFINE_KEYS = ("fill_mode", "interpolation", "fill_value", "seed", "data_format")


def check_affine_transform(d, driver):
    """lockstep's affine_transform against keras.ops.image.affine_transform for the same transforms:
    rotations by any angle, scales and shifts past the image, a projective row with k = 0 at a
    pixel; every fill mode and interpolation."""
    rs = np.random.RandomState(27)
    images = rs.uniform(0, 1, (6, 7, 9, 2)).astype(np.float32)
    a, s = rs.uniform(-7, 7, 6), rs.uniform(0.3, 3, 6)
    t = np.stack([s * np.cos(a), -s * np.sin(a), rs.uniform(-15, 15, 6), s * np.sin(a), s * np.cos(a),
                  rs.uniform(-15, 15, 6), np.zeros(6), np.zeros(6)], axis=1).astype(np.float32)
    t[5] = [1, 0.1, 0, 0, 1, 0, -0.25, 0]  # k = 1 - x / 4: 0 at x = 4
    np.save(os.path.join(d, "affine_images.npy"), images)
    np.save(os.path.join(d, "affine_transforms.npy"), t)
    for interpolation in ("nearest", "bilinear"):
        for mode in ("reflect", "wrap", "constant", "nearest"):
            want = np.asarray(keras.ops.image.affine_transform(images, t, interpolation=interpolation,
                                                               fill_mode=mode, fill_value=0.25))
            out = os.path.join(d, f"affine_{interpolation}_{mode}.npy")
            r = run(driver, "affine-transform", os.path.join(d, "affine_images.npy"),
                    os.path.join(d, "affine_transforms.npy"), interpolation, mode, "0.25", out)
            err = np.abs(np.load(out) - want).max() if r.returncode == 0 else float("inf")
            failed = f": {r.stderr.strip()}" if r.returncode != 0 else ""
            check(err <= 1e-5, f"affine_transform {interpolation}/{mode} as keras.ops.image.affine_transform "
                               f"(max abs {err:.2e}){failed}")


def both_ways(model, x, d, cli, driver, what):
    return kf.both_ways(model, x, d, cli, driver, what, RTOL)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, cli, driver = sys.argv[1:]
    os.makedirs(d, exist_ok=True)
    print(f"keras {keras.__version__}")
    model = keras_model()
    x = np.random.RandomState(0).randint(0, VOCAB, (32, STEPS)).astype(np.float32)
    back = both_ways(model, x, d, cli, driver, "every new layer")
    if back is not None:
        check(sorted(l.__class__.__name__ for l in back.layers) == sorted(l.__class__.__name__ for l in model.layers),
              "every new layer: same layer classes after the re-save")
    # Keras' save_weights file, loaded into lockstep's copy of the model.
    weights = os.path.join(d, f"{model.name}.weights.h5")
    model.save_weights(weights)
    out = os.path.join(d, f"{model.name}_w_pred.npy")
    r = run(driver, "load-weights", os.path.join(d, f"{model.name}.keras"), weights,
            os.path.join(d, f"{model.name}_x.npy"), out)
    e = rel(np.load(out), model.predict(x, verbose=0)) if r.returncode == 0 else float("inf")
    failed = f": {r.stderr.strip()}" if r.returncode != 0 else ""
    check(e <= RTOL, f"every new layer: Keras' .weights.h5 loads in lockstep (rel {e:.2e}){failed}")
    # Padding at the end of each row, from none up to all but two steps: the mask matters.
    x = np.random.RandomState(3).randint(1, VOCAB, (16, STEPS)).astype(np.float32)
    for row in range(16):
        x[row, STEPS - row % (STEPS - 1):] = 0
    both_ways(keras_masked_model(), x, d, cli, driver, "Embedding(mask_zero) masking GlobalAveragePooling1D")
    both_ways(keras_masked_functional(), x, d, cli, driver, "Functional Embedding(mask_zero): the NotEqual mask node")
    both_ways(keras_masked_convnet(), x, d, cli, driver, "Embedding(mask_zero) before Conv1D: the mask ignored")
    both_ways(keras_masked_merges(), x, d, cli, driver, "Add's masks: LogicalOr of masked inputs, none beside an unmasked one")
    both_ways(keras_masked_concatenate(), x, d, cli, driver, "Concatenate's masks: Keras' mask op nodes")
    embedding_mask_into_softmax(x, d, cli)
    masked_softmax_both_ways(d, driver)
    # Float steps padded with all-0 (all-0.5) features: Masking's mask.
    steps = np.random.RandomState(15).normal(0, 1, (16, STEPS, 3)).astype(np.float32)
    for row in range(16):
        steps[row, STEPS - row % (STEPS - 1):] = 0
    steps[::4, 1] = 0  # and in the middle of some rows
    both_ways(keras_masking_model(), steps, d, cli, driver, "Masking(0.0) -> Dense -> GlobalAveragePooling1D")
    steps[steps == 0] = 0.5
    steps[1, 2, 0] = 0.5  # a step with one feature equal to mask_value is kept
    both_ways(keras_masking_functional(), steps, d, cli, driver, "Functional Masking(0.5): not_equal and any nodes")
    # Padding in the middle of rows as well: a padded query step attends to every step alike.
    x_mid = x.copy()
    x_mid[::3, 1] = 0
    both_ways(keras_masked_attention(), x_mid, d, cli, driver, "Embedding(mask_zero) into MultiHeadAttention")
    # The sequence convnet layers, and keras.io's text classifier after a few training steps.
    tokens = np.random.RandomState(6).randint(0, VOCAB, (32, STEPS * 2)).astype(np.float32)
    both_ways(keras_sequence_convnet(), tokens, d, cli, driver, "every sequence convnet layer")
    classifier = keras_text_classifier()
    words = np.random.RandomState(7).randint(0, VOCAB, (64, 40))
    classifier.fit(words, (words.max(axis=1) > VOCAB // 2).astype(np.float32), batch_size=16, epochs=1, verbose=0)
    both_ways(classifier, words.astype(np.float32), d, cli, driver, "keras.io's text classifier, trained")
    images = np.random.RandomState(18).normal(0, 2, (16, 8, 8, 3)).astype(np.float32)
    both_ways(keras_activations_model(), images, d, cli, driver,
              "Keras 3's activations, ReLU / LeakyReLU / ELU / PReLU and SeparableConv2D")
    # The decoder side (Conv2DTranspose, UpSampling2D / 1D, Cropping2D, ZeroPadding1D).
    autoencoder, unet, sequence = keras_decoder_models()
    both_ways(autoencoder, np.random.RandomState(8).uniform(0, 1, (16, 12, 12, 1)).astype(np.float32), d, cli, driver,
              "keras.io's denoising autoencoder")
    both_ways(unet, np.random.RandomState(9).normal(0, 1, (8, 10, 10, 3)).astype(np.float32), d, cli, driver,
              "a U-Net: UpSampling2D, Cropping2D, Conv2DTranspose's strides, output_padding and dilation")
    both_ways(sequence, np.random.RandomState(10).normal(0, 1, (8, 6, 3)).astype(np.float32), d, cli, driver,
              "UpSampling1D and ZeroPadding1D")
    # Keras 3's other regularization layers and normalisations.
    sequence, images = keras_regularization_models()
    both_ways(sequence, np.random.RandomState(20).normal(0, 2, (16, 6, 8)).astype(np.float32), d, cli, driver,
              "SpatialDropout1D, GaussianNoise, GaussianDropout, AlphaDropout, GroupNormalization, UnitNormalization")
    both_ways(images, np.random.RandomState(21).normal(0, 2, (16, 4, 5, 5)).astype(np.float32), d, cli, driver,
              "SpatialDropout2D both data formats, GroupNormalization(axis=1), UnitNormalization")
    # Keras 3's preprocessing layers: Normalization's adapted statistics and RandomFlip.
    images = np.random.RandomState(19).uniform(0, 255, (16, 6, 5, 3)).astype(np.float32)
    table = (np.random.RandomState(20).normal(0, 1, (32, 4)) * [1, 10, 100, 0.1] + [5, -3, 50, 0]).astype(np.float32)
    image_model, tabular = keras_preprocessing_models(images, table)
    back = both_ways(image_model, images, d, cli, driver, "Normalization adapted on images, RandomFlip, Resizing, CenterCrop")
    if back is not None:
        stats = [np.asarray(w) for w in back.layers[1].weights]
        want = [np.asarray(w) for w in image_model.layers[1].weights]
        check(len(stats) == 3 and all(a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b)
                                      for a, b in zip(stats, want)),
              "Normalization: lockstep's file holds Keras' mean, variance and int64 count")
    both_ways(tabular, table, d, cli, driver, "Normalization per feature, axis=None, given and inverted")
    both_ways(keras_resize_model(), np.random.RandomState(22).normal(0, 2, (8, 7, 6, 3)).astype(np.float32), d, cli,
              driver, "Resizing and UpSampling2D bicubic, lanczos3, lanczos5 and area; antialias; pad_to_aspect_ratio")
    # RandomContrast, RandomBrightness and SpatialDropout3D: predict's identity, configs both ways.
    colour, volumes = keras_random_colour_models()
    back = both_ways(colour, np.random.RandomState(24).uniform(0, 1, (8, 6, 5, 3)).astype(np.float32), d, cli,
                     driver, "RandomContrast and RandomBrightness (identity in predict)")
    if back is not None:
        for name in ("contrast", "contrast_pair", "brightness", "brightness_number"):
            want, got = colour.get_layer(name).get_config(), back.get_layer(name).get_config()
            check(np.allclose(want["factor"], got["factor"]) and np.allclose(want["value_range"], got["value_range"])
                  and want["seed"] == got["seed"] and want["data_format"] == got["data_format"],
                  f"{name}: factor, value_range and seed as Keras wrote them ({got} for {want})")
    back = both_ways(volumes, np.random.RandomState(25).normal(0, 1, (8, 3, 4, 4, 2)).astype(np.float32), d, cli,
                     driver, "SpatialDropout3D both data formats")
    if back is not None:
        check([l.get_config().get("data_format") for l in back.layers if "spatial" in l.name]
              == ["channels_last", "channels_first"], "SpatialDropout3D: data_format both ways")
    # RandomTranslation, RandomRotation, RandomZoom: the transform itself, predict's identity, configs.
    check_affine_transform(d, driver)
    affine = keras_random_affine_model()
    back = both_ways(affine, np.random.RandomState(28).uniform(0, 1, (8, 6, 5, 3)).astype(np.float32), d, cli,
                     driver, "RandomTranslation, RandomRotation and RandomZoom (identity in predict)")
    if back is not None:
        for layer in affine.layers[1:7]:
            want, got = layer.get_config(), back.get_layer(layer.name).get_config()
            factors = [k for k in ("height_factor", "width_factor", "factor") if k in want]
            same = all((want[k] is None and got[k] is None) or np.allclose(want[k], got[k]) for k in factors)
            check(same and all(want[k] == got[k] for k in AFFINE_KEYS),
                  f"{layer.name}: factors and options as Keras wrote them ({got} for {want})")
    check_seeded(d, cli, driver)
    print(f"{len(kf.failures)} failure(s)")
    return 1 if kf.failures else 0


if __name__ == "__main__":
    sys.exit(main())
