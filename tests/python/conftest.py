"""Shared fixtures: a small MNIST subset (the data lockstep's loader reads, set up by scripts/setup.sh)."""
import numpy as np
import pytest

import lockstep as tf


@pytest.fixture(scope="session")
def mnist():
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
    return (x_train, y_train), (x_test, y_test)


@pytest.fixture(scope="session")
def mnist_small(mnist):
    """6,000 training and 1,000 test images scaled to [0, 1] as float32."""
    (x_train, y_train), (x_test, y_test) = mnist
    return ((x_train[:6000] / np.float32(255), y_train[:6000]), (x_test[:1000] / np.float32(255), y_test[:1000]))


def mlp(tf_module, input_shape=(28, 28)):
    return tf_module.keras.Sequential([
        tf_module.keras.layers.Flatten(input_shape=input_shape),
        tf_module.keras.layers.Dense(64, activation="relu"),
        tf_module.keras.layers.Dense(10, activation="softmax"),
    ])
