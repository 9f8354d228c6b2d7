"""lockstep: synchronous data-parallel training in C++, with TensorFlow's names.

`import lockstep as tf` gives tf.keras, tf.distribute, tf.data, tf.nn, tf.Tensor, tf.Variable,
tf.GradientTape, tf.function and the ops of a custom loop for what lockstep supports; any other name
raises an AttributeError naming it ("lockstep does not support tf.X yet")."""
from . import _lockstep, data, distribute, errors, keras, math, nn, train
from ._support import in_jupyter_kernel, unsupported_getattr
from .ops import (GradientTape, Tensor, Variable, abs, add, add_n, argmax, bfloat16, cast, constant,  # noqa: A004
                  convert_to_tensor, equal, exp, float16, float32, function, greater, greater_equal, int32, int64,
                  less, less_equal, matmul, maximum, minimum, not_equal, reduce_max, reduce_mean, reduce_sum,
                  reshape, sqrt, square, stop_gradient, uint8, where)

if in_jupyter_kernel():
    _lockstep.set_stdout_redraws(True)  # fit's and evaluate's progress bars, as Keras' in Jupyter

__version__ = "0.1.0"
__getattr__ = unsupported_getattr("tf")
__all__ = ["GradientTape", "Tensor", "Variable", "data", "distribute", "errors", "function", "keras", "math", "nn",
           "train"]
