"""Keras' freezing through `import lockstep as tf`: layer.trainable = False, model.trainable = False and
the constructors' trainable=False, the weights lists that follow them, and keras.io's transfer-learning
guide (freeze a base, train a new head; unfreeze, compile with a low rate, fine-tune)."""
import numpy as np
import pytest

from lockstep import keras
from lockstep.keras import layers


def data(n=96, features=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)).astype(np.float32), rng.integers(0, classes, n)


def changed(before, after):
    return [not np.array_equal(a, b) for a, b in zip(before, after)]


def test_transfer_learning_as_the_guide_writes_it():
    x, y = data()
    keras.utils.set_random_seed(1)
    base_model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(16, activation="relu"),
                                   layers.Dense(8, activation="relu")], name="base")
    base_model.trainable = False
    assert base_model.trainable_weights == [] and len(base_model.non_trainable_weights) == 4
    inputs = keras.Input(shape=(6,))
    outputs = layers.Dense(3, activation="softmax")(base_model(inputs))
    model = keras.Model(inputs, outputs)
    assert len(model.trainable_weights) == 2 and len(model.non_trainable_weights) == 4
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    base_before, head_before = base_model.get_weights(), model.layers[-1].get_weights()
    model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert not any(changed(base_before, base_model.get_weights())), "the frozen base trained"
    assert all(changed(head_before, model.layers[-1].get_weights())), "the new head did not train"

    # Fine-tuning: unfreeze, compile again (the change takes effect there) with a very low rate, fit.
    base_model.trainable = True
    assert len(model.trainable_weights) == 6
    model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="sparse_categorical_crossentropy")
    tuned_before = base_model.get_weights()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    tuned = base_model.get_weights()
    assert all(changed(tuned_before, tuned)), "unfrozen and compiled again, the base did not train"
    # A low rate moves the weights a little: Adam's steps are at most about the rate each.
    steps = 96 // 16
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(tuned, tuned_before)) <= 2e-5 * steps


def test_a_frozen_layer_lists_its_weights_as_non_trainable_and_fit_leaves_them():
    x, y = data()
    keras.utils.set_random_seed(2)
    frozen = layers.Dense(8, activation="tanh", trainable=False)  # Keras' constructor argument
    assert frozen.trainable is False
    model = keras.Sequential([keras.Input(shape=(6,)), frozen, layers.BatchNormalization(),
                              layers.Dense(3, activation="softmax")])
    assert frozen.trainable_weights == [] and len(frozen.non_trainable_weights) == 2
    norm = model.layers[1]
    norm.trainable = False  # Keras' rule: inference mode inside fit, its moving statistics kept
    assert [w.name for w in model.trainable_weights] == [w.name for w in model.layers[2].weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="sparse_categorical_crossentropy")
    before = model.get_weights()
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert changed(before, model.get_weights()) == [False] * 6 + [True] * 2


def test_a_change_after_compile_takes_effect_at_the_next_compile():
    x, y = data()
    model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(8), layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.layers[0].trainable = False
    with pytest.raises(ValueError, match=r"was set trainable = false after compile\(\).*call compile\(\) again"):
        model.fit(x, y, epochs=1, verbose=0)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    before = model.layers[0].get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    assert not any(changed(before, model.layers[0].get_weights()))


def test_model_trainable_is_recursive_and_the_constructors_take_it():
    model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(8), layers.Dense(3)], trainable=False)
    assert model.trainable is False and not any(layer.trainable for layer in model.layers)
    assert model.trainable_weights == [] and len(model.non_trainable_weights) == 4
    model.trainable = True
    assert all(layer.trainable for layer in model.layers) and len(model.trainable_weights) == 4
    inputs = keras.Input(shape=(6,))
    functional = keras.Model(inputs, layers.Dense(2)(inputs), trainable=False)
    assert functional.trainable is False and functional.trainable_weights == []


def test_a_frozen_subclassed_layer_freezes_the_layers_it_holds():
    class Block(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.inner = layers.Dense(4, activation="relu")
            self.outer = layers.Dense(4)

        def call(self, x):
            return self.outer(self.inner(x))

    block = Block(trainable=False)  # set before its sublayers: they are frozen as they are set
    assert block.trainable is False and block.get_config()["trainable"] is False
    inputs = keras.Input(shape=(4,))
    model = keras.Model(inputs, layers.Dense(2)(block(inputs)))
    assert len(block.weights) == 4 and block.trainable_weights == []
    assert len(model.trainable_weights) == 2
    block.trainable = True
    assert len(block.trainable_weights) == 4 and len(model.trainable_weights) == 6


def test_keras_files_keep_a_frozen_layer(tmp_path):
    model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(8, name="base"), layers.Dense(3, name="head")])
    model.get_layer("base").trainable = False
    model.compile(optimizer="adam", loss="mse")
    path = str(tmp_path / "frozen.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("base").trainable is False and loaded.get_layer("head").trainable is True
    assert [w.name for w in loaded.trainable_weights] == [w.name for w in loaded.get_layer("head").weights]


def guide_model(training):
    """The guide's model with a base that has BatchNormalization and Dropout, called as
    base_model(inputs, training=training); the base frozen."""
    keras.utils.set_random_seed(2)
    base_model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(16, activation="relu"),
                                   layers.BatchNormalization(), layers.Dropout(0.5)], name="base")
    base_model.trainable = False
    inputs = keras.Input(shape=(6,))
    outputs = layers.Dense(3, activation="softmax")(base_model(inputs, training=training))
    return base_model, keras.Model(inputs, outputs)


@pytest.mark.parametrize("training", [False, None])
def test_the_guides_base_called_with_training_false_stays_in_inference_mode_when_fine_tuned(training):
    # keras.io's transfer-learning guide: "x = base_model(inputs, training=False)", so that once the
    # base is unfrozen for fine-tuning its BatchNormalization still runs on (and leaves alone) its
    # moving statistics, and its Dropout drops nothing. Without training=, fine-tuning moves them.
    x, y = data()
    base_model, model = guide_model(training)
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    base_before = base_model.get_weights()
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert not any(changed(base_before, base_model.get_weights())), "the frozen base trained"

    base_model.trainable = True
    model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="sparse_categorical_crossentropy")
    bn = base_model.layers[1]
    gamma, beta, moving_mean, moving_variance = bn.get_weights()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    tuned = bn.get_weights()
    assert changed([gamma, beta], tuned[:2]) == [True, True], "the unfrozen BatchNormalization did not train"
    kept = not any(changed([moving_mean, moving_variance], tuned[2:]))
    assert kept == (training is False)
    # A training-mode call (a custom loop's) of the inference-mode base: BatchNormalization on its
    # moving statistics and no dropout, so the same outputs as an inference call.
    same = np.array_equal(np.asarray(model(x, training=True)), np.asarray(model(x, training=False)))
    assert same == (training is False)


def test_a_keras_file_keeps_the_bases_training_false(tmp_path):
    x, y = data()
    base_model, model = guide_model(False)
    base_model.trainable = True
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    path = str(tmp_path / "guide.keras")
    model.save(path)  # warns that the Dropout's training=False cannot be kept (Keras writes it on every call)
    loaded = keras.models.load_model(path)
    bn = loaded.get_layer(base_model.layers[1].name)
    before = bn.get_weights()
    loaded.fit(x, y, epochs=1, batch_size=16, verbose=0)
    after = bn.get_weights()
    assert changed(before, after) == [True, True, False, False]


def test_a_dropout_called_with_training_true_drops_in_predict():
    inputs = keras.Input(shape=(64,))
    model = keras.Model(inputs, layers.Dropout(0.5)(inputs, training=True))
    out = model.predict(np.ones((4, 64), np.float32), verbose=0)
    assert set(np.unique(out)) == {0.0, 2.0}
    plain = keras.Model(inputs, layers.Dropout(0.5)(inputs))
    assert np.array_equal(plain.predict(np.ones((4, 64), np.float32), verbose=0), np.ones((4, 64)))


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_training_that_is_not_a_bool_is_a_type_error_naming_it(bad):
    inputs = keras.Input(shape=(6,))
    with pytest.raises(TypeError, match=r"keras\.layers\.Dropout\.__call__: training must be True, False or None"):
        layers.Dropout(0.5)(inputs, training=bad)
    base = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(2)])
    with pytest.raises(TypeError, match=r"keras\.Model\.__call__: training must be True, False or None, got"):
        base(inputs, training=bad)
    with pytest.raises(TypeError, match=r"training must be True, False or None"):
        base(np.ones((2, 6), np.float32), training=bad)
