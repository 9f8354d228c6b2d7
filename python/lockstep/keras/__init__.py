"""tf.keras on lockstep: Sequential models, compile / fit / evaluate / predict, layers, optimizers,
losses, metrics, callbacks, datasets and saved models, with Keras' names and defaults."""
from .._support import unsupported_getattr
from . import callbacks, datasets, layers, losses, metrics, models, optimizers, utils
from .layers import Input
from .models import Model, Sequential

__getattr__ = unsupported_getattr("tf.keras")
__all__ = ["Input", "Model", "Sequential", "callbacks", "datasets", "layers", "losses", "metrics", "models",
           "optimizers", "utils"]
