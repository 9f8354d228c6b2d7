"""lockstep: synchronous data-parallel training in C++, with TensorFlow's names.

`import lockstep as tf` gives tf.keras, tf.distribute and tf.data for what lockstep supports; any
other name raises an AttributeError naming it ("lockstep does not support tf.X yet")."""
from . import _lockstep, data, distribute, errors, keras
from ._support import unsupported_getattr

__version__ = "0.1.0"
__getattr__ = unsupported_getattr("tf")
__all__ = ["data", "distribute", "errors", "keras"]
