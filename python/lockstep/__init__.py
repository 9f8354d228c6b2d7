"""lockstep: synchronous data-parallel training in C++, with TensorFlow's names.

`import lockstep as tf` gives tf.keras, tf.distribute and tf.data for what lockstep supports; any
other name raises an AttributeError naming it ("lockstep does not support tf.X yet")."""
from . import _lockstep, data, distribute, errors, keras
from ._support import in_jupyter_kernel, unsupported_getattr

if in_jupyter_kernel():
    _lockstep.set_stdout_redraws(True)  # fit's and evaluate's progress bars, as Keras' in Jupyter

__version__ = "0.1.0"
__getattr__ = unsupported_getattr("tf")
__all__ = ["data", "distribute", "errors", "keras"]
