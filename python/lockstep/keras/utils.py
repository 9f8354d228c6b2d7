"""keras.utils: the seed that models built from now on derive their weights and dropout from, and
to_categorical."""
import numpy as np

from .. import _lockstep
from .._support import unsupported_getattr

__getattr__ = unsupported_getattr("tf.keras.utils")


def set_random_seed(seed):
    _lockstep.set_random_seed(int(seed))


def to_categorical(x, num_classes=None):
    """Keras' one-hot rows (float32) of integer class labels: shape x.shape + (num_classes,), a
    trailing axis of 1 dropped first. num_classes defaults to the largest label + 1; a label outside
    [0, num_classes) is a ValueError naming it (NumPy would index from the end for a negative one)."""
    labels = np.asarray(x)
    if labels.dtype.kind not in "iub" and not (labels.dtype.kind == "f" and np.all(labels == np.round(labels))):
        raise ValueError(f"keras.utils.to_categorical: labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64)
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels.reshape(labels.shape[:-1])
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    num_classes = int(num_classes)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels.min() if labels.min() < 0 else labels.max()
        raise ValueError(f"keras.utils.to_categorical: label {bad} is outside [0, {num_classes})")
    out = np.zeros(labels.shape + (num_classes,), dtype=np.float32)
    np.put_along_axis(out, labels[..., None], 1.0, axis=-1)
    return out
