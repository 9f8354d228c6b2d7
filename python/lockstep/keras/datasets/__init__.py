"""keras.datasets: the datasets lockstep's C++ loaders read (scripts/setup.sh puts them in place)."""
from ..._support import unsupported_getattr
from . import fashion_mnist, mnist

__getattr__ = unsupported_getattr("tf.keras.datasets")
__all__ = ["mnist", "fashion_mnist"]
