"""A Keras user's everyday programs through `import lockstep as tf` (after keras.io's guides and
examples, written anew): the simple MNIST convnet, a Functional model of two inputs and two outputs,
a transformer block classifier, saving and loading, and a tf.data pipeline. Each asserts what the
user relies on: it trains, round-trips bit for bit, or refuses by name what lockstep lacks."""
import numpy as np
import pytest

import lockstep as tf
from lockstep import keras
from lockstep.keras import layers


# --- 1. The simple MNIST convnet: one-hot labels, categorical cross-entropy, validation_split ---

def test_to_categorical_gives_keras_one_hot_rows():
    np.testing.assert_array_equal(keras.utils.to_categorical([2, 0, 1]), np.eye(3, dtype=np.float32)[[2, 0, 1]])
    one_hot = keras.utils.to_categorical(np.array([[1], [3]]), num_classes=5)  # a trailing axis of 1 is dropped
    assert one_hot.shape == (2, 5) and one_hot.dtype == np.float32
    np.testing.assert_array_equal(one_hot.argmax(axis=1), [1, 3])
    assert keras.utils.to_categorical(np.array([[0, 1], [2, 0]])).shape == (2, 2, 3)
    np.testing.assert_array_equal(keras.utils.to_categorical(np.array([1.0, 0.0])), [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="label 3 is outside \\[0, 3\\)"):
        keras.utils.to_categorical([0, 3], num_classes=3)
    with pytest.raises(ValueError, match="label -1 is outside"):
        keras.utils.to_categorical([0, -1], num_classes=3)  # NumPy would count it from the end
    with pytest.raises(ValueError, match="labels must be integers"):
        keras.utils.to_categorical([0.5, 1.0])


def test_simple_mnist_convnet_trains_on_one_hot_labels(mnist_small):
    (x_train, y_train), (x_test, y_test) = mnist_small
    x_train, x_test = np.expand_dims(x_train[:3200], -1), np.expand_dims(x_test, -1)
    y_train, y_test = keras.utils.to_categorical(y_train[:3200], 10), keras.utils.to_categorical(y_test, 10)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])
    lines = []
    model.summary(print_fn=lines.append)
    assert "max_pooling2d_1 (MaxPooling2D)" in lines[0] and "Total params: 12,810" in lines[0]
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    history = model.fit(x_train, y_train, batch_size=32, epochs=1, validation_split=0.1, verbose=0)
    assert history.history["val_accuracy"][0] > 0.8  # 90 steps on 2,880 images
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.8 and loss < 0.7
    probabilities = model.predict(x_test, verbose=0)
    assert probabilities.shape == (1000, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)
    # "accuracy" with one-hot targets is Keras' categorical accuracy: the argmax of both agree.
    assert accuracy == pytest.approx(np.mean(probabilities.argmax(1) == y_test.argmax(1)), abs=1e-6)


# --- 2. The Functional API: two inputs, two outputs, per-output losses and weights ---

def two_by_two(seed):
    keras.utils.set_random_seed(seed)
    features = keras.Input(shape=(8,), name="features")
    extra = keras.Input(shape=(4,), name="extra")
    x = layers.Concatenate()([features, extra])
    x = layers.Dense(32, activation="relu")(x)
    return features, extra, layers.Dense(2, activation="softmax", name="cls")(x), layers.Dense(1, name="reg")(x)


def two_by_two_data(n=1024):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, 8)).astype(np.float32)
    b = rng.normal(size=(n, 4)).astype(np.float32)
    return a, b, (a[:, 0] + b[:, 0] > 0).astype(np.int32), (0.5 * a[:, 1] - b[:, 1]).reshape(n, 1).astype(np.float32)


def test_two_inputs_two_outputs_train_with_a_loss_per_output_and_loss_weights():
    a, b, cls, reg = two_by_two_data()
    features, extra, out_cls, out_reg = two_by_two(5)
    model = keras.Model(inputs=[features, extra], outputs=[out_cls, out_reg])
    assert [layer.name for layer in model.layers][:3] == ["features", "extra", "concatenate"]
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": ["accuracy"]})
    history = model.fit([a, b], {"cls": cls, "reg": reg}, epochs=4, batch_size=64, validation_split=0.25, verbose=0)
    assert history.history["val_cls_accuracy"][-1] > 0.9
    assert history.history["val_reg_loss"][-1] < 0.1 < history.history["reg_loss"][0]
    logs = model.evaluate([a, b], [cls, reg], verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(logs["cls_loss"] + 0.5 * logs["reg_loss"], rel=1e-5)
    predicted = model.predict([a[:10], b[:10]], verbose=0)
    assert isinstance(predicted, list) and [p.shape for p in predicted] == [(10, 2), (10, 1)]
    # Inputs by their names give what the list gives.
    by_name = model.predict({"extra": b[:10], "features": a[:10]}, verbose=0)
    for p, q in zip(predicted, by_name):
        np.testing.assert_array_equal(p, q)


def test_metric_objects_per_output_are_logged_under_the_outputs_names():
    a, b, cls, reg = two_by_two_data(256)
    features, extra, out_cls, out_reg = two_by_two(5)
    model = keras.Model(inputs=[features, extra], outputs=[out_cls, out_reg])
    top1 = keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top1")
    model.compile(optimizer="adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  metrics={"cls": [top1, "accuracy"], "reg": keras.metrics.MeanAbsoluteError()})
    logs = model.evaluate([a, b], [cls, reg], verbose=0, return_dict=True)
    assert {"cls_top1", "cls_accuracy", "reg_mean_absolute_error"} <= set(logs)
    assert logs["cls_top1"] == pytest.approx(logs["cls_accuracy"])  # the top 1 of two classes is the argmax
    assert float(top1.result()) == pytest.approx(logs["cls_top1"])  # the object itself
    np.testing.assert_allclose(logs["reg_mean_absolute_error"],
                               np.abs(model.predict([a, b], verbose=0)[1] - reg).mean(), rtol=1e-5)


def test_per_output_arguments_as_lists_train_the_bits_of_dicts():
    a, b, cls, reg = two_by_two_data(256)
    weights = []
    for form in ("dict", "list"):
        features, extra, out_cls, out_reg = two_by_two(9)
        model = keras.Model([features, extra], [out_cls, out_reg])
        if form == "dict":
            model.compile(optimizer="adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                          loss_weights={"cls": 0.7, "reg": 2.0}, metrics={"cls": ["accuracy"]})
            model.fit([a, b], {"cls": cls, "reg": reg}, epochs=2, shuffle=False, verbose=0)
        else:
            model.compile(optimizer="adam", loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[0.7, 2.0],
                          metrics=[["accuracy"], []])
            model.fit([a, b], [cls, reg], epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for w_dict, w_list in zip(*weights):
        np.testing.assert_array_equal(w_dict, w_list)


def test_dict_outputs_predict_a_dict_and_a_flat_dataset_trains_them():
    a, b, cls, reg = two_by_two_data(256)
    features, extra, out_cls, out_reg = two_by_two(2)
    model = keras.Model({"features": features, "extra": extra}, {"label": out_cls, "value": out_reg})
    model.compile(optimizer="adam", loss={"label": "sparse_categorical_crossentropy", "value": "mse"})
    # A dataset's elements are the inputs, then the targets, each structure flat in its keys' order.
    ds = tf.data.Dataset.from_tensor_slices((b, a, cls, reg)).batch(32)
    history = model.fit(ds, epochs=2, verbose=0)
    assert set(history.history) >= {"loss", "label_loss", "value_loss"}
    predicted = model.predict({"features": a[:4], "extra": b[:4]}, verbose=0)
    assert sorted(predicted) == ["label", "value"] and predicted["label"].shape == (4, 2)


def test_nested_datasets_train_a_model_of_several_inputs_and_outputs_as_its_arrays_do():
    """Keras' tf.data form of a two-input, two-output program: elements ((inputs), {targets})."""
    a, b, cls, reg = two_by_two_data(256)
    runs = []
    for source in ("arrays", "dataset"):
        features, extra, out_cls, out_reg = two_by_two(4)
        model = keras.Model({"features": features, "extra": extra}, [out_cls, out_reg])
        model.compile(optimizer="adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                      metrics={"cls": ["accuracy"]})
        if source == "arrays":
            history = model.fit({"features": a, "extra": b}, [cls, reg], batch_size=32, shuffle=False, verbose=0)
        else:
            ds = tf.data.Dataset.from_tensor_slices(({"features": a, "extra": b}, (cls, reg))).batch(32)
            history = model.fit(ds, verbose=0)
            predicted = model.predict(ds, verbose=0)  # (inputs, targets) elements: predict reads the inputs
            np.testing.assert_array_equal(predicted[1], model.predict({"features": a, "extra": b}, verbose=0)[1])
        runs.append((history.history["loss"], model.get_weights()))
    assert runs[0][0] == runs[1][0]
    for x, y in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(x, y)


def test_nested_dataset_elements_come_back_nested_and_map_takes_them():
    a, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.arange(3, dtype=np.int32)
    ds = tf.data.Dataset.from_tensor_slices(({"y": a, "x": b}, (b, a)))
    first = next(iter(ds))
    assert sorted(first[0]) == ["x", "y"] and first[0]["x"] == 0
    np.testing.assert_array_equal(first[1][1].numpy(), [0, 1])
    doubled = ds.map(lambda inputs, targets: ({"sum": inputs["y"] * 2.0}, targets[0]))
    element = list(doubled.as_numpy_iterator())[2]
    np.testing.assert_array_equal(element[0]["sum"], [8, 10])
    assert element[1] == 2
    assert next(iter(tf.data.Dataset.from_tensor_slices({"only": b}).batch(3)))["only"].shape == (3,)


def test_a_model_of_one_output_takes_its_arguments_in_every_keras_form():
    x, y = np.linspace(0, 1, 24, dtype=np.float32).reshape(8, 3), np.ones((8, 1), np.float32)
    logs = []
    for outputs_form in ("one", "list", "dict"):
        keras.utils.set_random_seed(5)
        inputs = keras.Input(shape=(3,), name="x")
        out = layers.Dense(1, name="v")(inputs)
        model = keras.Model(inputs, {"one": out, "list": [out], "dict": {"v": out}}[outputs_form])
        for loss, metrics in (("mse", ["mae"]), ({"v": "mse"}, {"v": ["mae"]}), (["mse"], [["mae"]])):
            model.compile(optimizer="sgd", loss=loss, metrics=metrics)
            logs.append(model.evaluate([x], [y], verbose=0, return_dict=True))
        predicted = model.predict(x, verbose=0)
        assert isinstance(predicted, dict) if outputs_form == "dict" else predicted.shape == (8, 1)
    assert all(entry == logs[0] for entry in logs) and sorted(logs[0]) == ["loss", "mae"]


def test_what_a_model_of_several_inputs_and_outputs_refuses_is_named():
    a, b, cls, reg = two_by_two_data(64)
    features, extra, out_cls, out_reg = two_by_two(1)
    model = keras.Model([features, extra], [out_cls, out_reg])
    with pytest.raises(ValueError, match="loss has 1 entries for the model's 2 outputs \\(cls, reg\\)"):
        model.compile(optimizer="adam", loss=["mse"])
    with pytest.raises(ValueError, match="give metrics per output"):
        model.compile(optimizer="adam", loss="mse", metrics=["accuracy"])
    with pytest.raises(ValueError, match="'rgr' is not an output"):
        model.compile(optimizer="adam", loss={"cls": "mse", "rgr": "mse"})
    model.compile(optimizer="adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"})
    with pytest.raises(ValueError, match="expected 2 arrays \\(features, extra\\), got 3"):
        model.fit([a, b, b], [cls, reg], verbose=0)
    with pytest.raises(ValueError, match="missing reg"):
        model.fit([a, b], {"cls": cls}, verbose=0)
    with pytest.raises(ValueError, match="expected a numeric array, got str"):
        model.fit([a, "b"], [cls, reg], verbose=0)
    with pytest.raises(ValueError, match="calling model 'functional' of several inputs or outputs"):
        model([a, b])
    # A dict is flat in its keys' order, not the list model's (features, extra): named, not silently swapped.
    swapped = tf.data.Dataset.from_tensor_slices(({"features": a, "extra": b}, (cls, reg))).batch(8)
    with pytest.raises(ValueError, match="give them as a tuple in the model's order"):
        model.fit(swapped, verbose=0)
    mapped = tf.data.Dataset.from_tensor_slices((a, b, cls, reg)).map(
        lambda x1, x2, y1, y2: ({"features": x1, "extra": x2}, (y1, y2))).batch(8)
    with pytest.raises(ValueError, match="give them as a tuple in the model's order"):
        model.fit(mapped, verbose=0)  # checked at the map's first element
    with pytest.raises(ValueError, match="the dataset's dict has cls, rgr; the model's entries are cls, reg"):
        model.evaluate(tf.data.Dataset.from_tensor_slices(((a, b), {"cls": cls, "rgr": reg})).batch(8), verbose=0)
    one = keras.Sequential([keras.Input(shape=(8,)), layers.Dense(1)])
    with pytest.raises(ValueError, match="loss_weights"):
        one.compile(optimizer="adam", loss="mse", loss_weights=[0.5])


# --- 3. A transformer block classifier: Embedding, MultiHeadAttention, LayerNormalization ---

def transformer_classifier(maxlen, vocab, embed=32):
    inputs = keras.Input(shape=(maxlen,))
    h = layers.Embedding(vocab, embed)(inputs)
    attended = layers.MultiHeadAttention(num_heads=2, key_dim=embed)(h, h)  # Keras' mha(query, value)
    h1 = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([h, layers.Dropout(0.1)(attended)]))
    ff = layers.Dense(embed)(layers.Dense(32, activation="relu")(h1))
    h2 = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([h1, layers.Dropout(0.1)(ff)]))
    pooled = layers.Dropout(0.1)(layers.GlobalAveragePooling1D()(h2))
    outputs = layers.Dense(2, activation="softmax")(layers.Dense(20, activation="relu")(pooled))
    return keras.Model(inputs=inputs, outputs=outputs)


def test_transformer_block_classifier_learns_whether_a_token_occurs():
    rng = np.random.default_rng(3)
    maxlen, vocab = 16, 50
    x = rng.integers(1, vocab, size=(1600, maxlen)).astype(np.int32)
    y = (x == 7).any(axis=1).astype(np.int32)  # about 28% positive
    keras.utils.set_random_seed(4)
    model = transformer_classifier(maxlen, vocab)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=2, validation_split=0.2, verbose=0)
    assert history.history["val_accuracy"][-1] > 0.95


def test_a_sequential_built_with_add_starts_from_keras_input():
    keras.utils.set_random_seed(3)
    built = keras.Sequential()
    built.add(keras.Input(shape=(4,)))
    built.add(layers.Dense(3))
    keras.utils.set_random_seed(3)
    listed = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(3)])
    assert built.output_shape == (None, 3) and [layer.name for layer in built.layers] == ["dense"]
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(built.predict(x, verbose=0), listed.predict(x, verbose=0))
    with pytest.raises(ValueError, match="a keras.Input can only be the first"):
        built.add(keras.Input(shape=(3,)))


def test_variable_sequence_lengths_are_refused_by_name():
    with pytest.raises(ValueError, match="variable sizes \\(None\\) in keras.Input's shape"):
        keras.Input(shape=(None,))


def test_multi_head_attention_takes_keras_call_arguments_and_names_the_rest():
    query, value = keras.Input(shape=(4, 8)), keras.Input(shape=(6, 8))
    mha = layers.MultiHeadAttention(2, 4)
    assert mha(query, value).shape == (None, 4, 8)
    assert layers.MultiHeadAttention(2, 4)(query=query, value=value, key=keras.Input(shape=(6, 8))).shape == (None, 4, 8)
    causal = layers.MultiHeadAttention(2, 4)(query, query, use_causal_mask=True)
    model = keras.Model(query, causal)
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype(np.float32)
    changed = x.copy()
    changed[:, 3] += 1.0  # the last position: causal attention hides it from every earlier one
    np.testing.assert_array_equal(model.predict(x, verbose=0)[:, :3], model.predict(changed, verbose=0)[:, :3])
    with pytest.raises(NotImplementedError, match="calling keras.layers.MultiHeadAttention on anything but"):
        layers.MultiHeadAttention(2, 4)(query, value, attention_mask=np.ones((1, 4, 6)))
    out, scores = layers.MultiHeadAttention(2, 4)(query, value, return_attention_scores=True)  # Keras' tuple
    assert (out.shape, scores.shape) == ((None, 4, 8), (None, 2, 4, 6))
    assert layers.Dropout(0.5)(query, training=False).shape == query.shape  # a call's mode (test_freezing.py)
    with pytest.raises(ValueError, match="mask in keras.layers.Dense.__call__"):
        layers.Dense(2)(query, mask=None)


# --- 4. Saving and loading: .keras, weights arrays, .weights.h5 ---

def small_classifier():
    return keras.Sequential([keras.Input(shape=(10,)), layers.Dense(16, activation="relu"),
                             layers.Dense(3, activation="softmax")])


def test_saved_and_loaded_models_and_weights_predict_the_same_bits(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 10)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1).astype(np.int32)
    keras.utils.set_random_seed(7)
    model = small_classifier()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=2, verbose=0)
    expected = model.predict(x, verbose=0)

    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)
    assert loaded.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)
    loaded.fit(x, y, epochs=1, verbose=0)  # a loaded model trains on

    weights = model.get_weights()
    assert [w.shape for w in weights] == [(10, 16), (16,), (16, 3), (3,)]
    # Sequential.layers are the layers added (Keras leaves out the InputLayer), each with its weights.
    assert [layer.name for layer in model.layers] == ["dense", "dense_1"]
    assert model.get_layer("dense_1").name == "dense_1" and model.get_layer(index=0).name == "dense"
    with pytest.raises(ValueError, match="has no layer 'dense_2' \\(it has dense, dense_1;"):
        model.get_layer("dense_2")
    for got, want in zip(model.layers[1].get_weights(), weights[2:]):
        np.testing.assert_array_equal(got, want)
    keras.utils.set_random_seed(8)
    copy = small_classifier()
    assert not np.array_equal(copy.predict(x, verbose=0), expected)
    copy.set_weights(weights)
    np.testing.assert_array_equal(copy.predict(x, verbose=0), expected)
    weights[0][0, 0] += 1.0  # get_weights gives copies
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)

    model.save_weights(tmp_path / "m.weights.h5")
    keras.utils.set_random_seed(9)
    reloaded = small_classifier()
    reloaded.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), expected)


def test_legacy_h5_model_files_are_refused_by_name(tmp_path):
    model = small_classifier()
    with pytest.raises(ValueError, match="legacy HDF5 model files \\(.h5\\)"):
        model.save(tmp_path / "m.h5")  # was a saved-model folder named m.h5
    assert not (tmp_path / "m.h5").exists()
    with pytest.raises(ValueError, match="legacy HDF5 model files"):
        keras.models.load_model(tmp_path / "old.hdf5")


def test_set_weights_checks_every_array_before_changing_any():
    model = small_classifier()
    before = model.get_weights()
    with pytest.raises(ValueError, match="has 4 weights, got 3"):
        model.set_weights(before[:3])
    bad = [w + 1 for w in before[:3]] + [np.zeros(4, np.float32)]
    with pytest.raises(ValueError, match="has shape \\(3,\\), got an array of shape \\(4,\\)"):
        model.set_weights(bad)
    for w, v in zip(before, model.get_weights()):
        np.testing.assert_array_equal(w, v)
    model.set_weights([w.astype(np.float64) for w in before])  # float64 arrays are taken as float32
    with pytest.raises(ValueError, match="'dense_1' has 2 weights, got 1"):
        model.layers[1].set_weights(before[2:3])
    model.layers[1].set_weights([before[2] * 2, before[3]])
    np.testing.assert_array_equal(model.get_weights()[2], before[2] * 2)


def test_set_weights_reaches_every_replica():
    x = np.random.default_rng(1).normal(size=(8, 10)).astype(np.float32)
    keras.utils.set_random_seed(2)
    source = small_classifier()
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = small_classifier()
    model.set_weights(source.get_weights())
    # predict splits the batch over both replicas: each half runs on its own replica's copies.
    np.testing.assert_array_equal(model.predict(x, batch_size=8, verbose=0), source.predict(x, verbose=0))


# --- 5. tf.data: from_tensor_slices -> shuffle -> map -> batch -> prefetch ---

def test_a_tf_data_pipeline_trains_the_bits_of_the_same_arrays(mnist):
    (x_train, y_train), _ = mnist
    images, labels = x_train[:1024], y_train[:1024]

    def scale(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    runs = []
    for source in ("arrays", "dataset"):
        keras.utils.set_random_seed(6)
        model = keras.Sequential([keras.Input(shape=(28, 28)), layers.Flatten(), layers.Dense(32, activation="relu"),
                                  layers.Dense(10, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        if source == "arrays":
            history = model.fit(images / np.float32(255), labels, batch_size=64, shuffle=False, verbose=0)
        else:
            ds = (tf.data.Dataset.from_tensor_slices((images, labels))
                  .map(scale, num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(tf.data.AUTOTUNE))
            history = model.fit(ds, verbose=0)
        runs.append((history.history["loss"], model.get_weights()))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)


def test_a_shuffled_mapped_pipeline_trains_and_validates(mnist):
    (x_train, y_train), (x_test, y_test) = mnist

    def scale(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    train = (tf.data.Dataset.from_tensor_slices((x_train[:3000], y_train[:3000])).shuffle(1024)
             .map(scale, num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE))
    val = tf.data.Dataset.from_tensor_slices((x_test[:500], y_test[:500])).map(scale).batch(100)
    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input(shape=(28, 28)), layers.Flatten(), layers.Dense(64, activation="relu"),
                              layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(train, epochs=2, validation_data=val, verbose=0)
    assert history.history["val_accuracy"][-1] > 0.85
    assert model.evaluate(val, verbose=0)[1] == pytest.approx(history.history["val_accuracy"][-1])


def test_iterating_a_dataset_gives_what_a_tensorflow_program_reads():
    images = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    labels = np.arange(10, dtype=np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4)
    assert len(ds) == 3
    for x, y in ds.take(1):  # EagerTensor's numpy(), shape and dtype
        assert x.shape == (4, 4) and x.dtype == tf.float32 and type(x.numpy()) is np.ndarray
        np.testing.assert_array_equal(x.numpy(), images[:4])
        np.testing.assert_array_equal(y.numpy(), labels[:4])
        assert (y == np.arange(4)).all()  # elementwise, as TensorFlow's ==
    batches = list(ds.as_numpy_iterator())
    assert type(batches[-1][0]) is np.ndarray
    np.testing.assert_array_equal(batches[-1][1], labels[8:])
    single = list(tf.data.Dataset.from_tensor_slices(labels).as_numpy_iterator())
    assert single[3] == 3
    with pytest.raises(TypeError, match="infinite"):
        len(ds.repeat())


def test_tensors_compare_elementwise_as_tensorflow_2s():
    """A TF program's `t == 1` (Python compared identities before: always False)."""
    t = tf.constant([1.0, 2.0, 3.0])
    np.testing.assert_array_equal((t == [1.0, 0.0, 3.0]).numpy(), [1, 0, 1])
    np.testing.assert_array_equal((t != 2.0).numpy(), [1, 0, 1])
    assert bool(tf.constant(4.0) == 4) and not bool(tf.constant(4.0) != 4)
    assert (t == None) is False and (t != None) is True  # noqa: E711 (TensorFlow's answers)
    v = tf.Variable([1.0, 2.0])
    np.testing.assert_array_equal((v == [1.0, 0.0]).numpy(), [1, 0])
    with pytest.raises(TypeError, match="unhashable"):
        {t: 1}
