"""keras.datasets.mnist: ((x_train, y_train), (x_test, y_test)), uint8 images (N, 28, 28) and labels."""
import os

from ... import _lockstep


def load_data(path="mnist.npz"):
    """From lockstep's data folder ($LOCKSTEP_DATA_DIR/mnist, else ~/.lockstep/datasets/mnist); a
    folder given as path is read instead (it holds the four IDX files, raw or .gz)."""
    return _lockstep.mnist_load_data(str(path) if os.path.isdir(str(path)) else None)
