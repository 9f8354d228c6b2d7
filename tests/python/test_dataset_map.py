"""tf.data.Dataset.map with a Python function: run on the pipeline's threads (taking turns with the
GIL), results equal to NumPy's, its exceptions raised as they were, usable by fit and custom loops."""
import numpy as np
import pytest

import lockstep as tf


def normalize(image, label):
    return tf.cast(image, tf.float32) / 255.0, label


def test_normalisation_map_equals_numpy(mnist):
    (x, y), _ = mnist
    x, y = x[:3000], y[:3000]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).batch(256)
    batches = list(ds)
    assert len(batches) == 12 and isinstance(batches[0], tuple)
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    assert images.dtype == np.float32 and images.shape == (3000, 28, 28)
    np.testing.assert_array_equal(images, x.astype(np.float32) / np.float32(255))  # in input order
    np.testing.assert_array_equal(labels, y)


def test_map_of_one_component_and_numpy_results():
    values = np.arange(8, dtype=np.float32)
    doubled = list(tf.data.Dataset.from_tensor_slices(values).map(lambda v: v * 2.0, num_parallel_calls=3))
    np.testing.assert_array_equal(np.array(doubled), values * 2)
    as_pair = tf.data.Dataset.from_tensor_slices(values).map(lambda v: (v.numpy() + 1, np.int64(7))).batch(8)
    (plus_one, sevens), = list(as_pair)
    np.testing.assert_array_equal(plus_one, values + 1)
    np.testing.assert_array_equal(sevens, np.full(8, 7))


class NotAnImage(Exception):
    pass


@pytest.mark.parametrize("num_parallel_calls", [None, 4, tf.data.AUTOTUNE])
def test_an_exception_in_the_function_is_raised_as_it_was(num_parallel_calls):
    def check(v):
        if float(v) == 5:
            raise NotAnImage("element five")
        return v

    ds = tf.data.Dataset.range(10).map(check, num_parallel_calls=num_parallel_calls)
    with pytest.raises(NotAnImage, match="element five"):
        list(ds)


def test_leaving_a_parallel_map_early_does_not_hang():
    for _ in range(3):
        it = iter(tf.data.Dataset.range(10000).map(lambda v: tf.cast(v, tf.float32) + 1.0, num_parallel_calls=4).prefetch(16))
        assert next(it) == 1
        del it


def test_fit_and_custom_loop_read_a_mapped_dataset(mnist):
    (x, y), (x_test, y_test) = mnist
    ds = tf.data.Dataset.from_tensor_slices((x[:6000], y[:6000])).map(normalize, num_parallel_calls=tf.data.AUTOTUNE)
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                                     tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(ds.shuffle(6000).batch(64), epochs=2, verbose=0)
    _, accuracy = model.evaluate(x_test[:1000] / np.float32(255), y_test[:1000], verbose=0)
    assert accuracy > 0.85

    accuracy_metric = tf.keras.metrics.SparseCategoricalAccuracy()

    def test_step(inputs):
        images, labels = inputs
        accuracy_metric.update_state(labels, model(images, training=False))

    test_ds = tf.data.Dataset.from_tensor_slices((x_test[:1000], y_test[:1000])).map(normalize).batch(128)
    for batch in strategy.experimental_distribute_dataset(test_ds):
        strategy.run(test_step, args=(batch,))
    assert float(accuracy_metric.result()) == pytest.approx(accuracy, abs=1e-6)
