"""keras.utils: the seed that models built from now on derive their weights and dropout from."""
from .. import _lockstep
from .._support import unsupported_getattr

__getattr__ = unsupported_getattr("tf.keras.utils")


def set_random_seed(seed):
    _lockstep.set_random_seed(int(seed))
