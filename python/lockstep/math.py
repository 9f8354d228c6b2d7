"""tf.math: the same ops as tf.* (tf.math.equal is tf.equal), for what lockstep has."""
from ._support import unsupported_getattr
from .ops import (abs, add, add_n, argmax, equal, exp, greater, greater_equal, less, less_equal, maximum,  # noqa: A004
                  minimum, not_equal, reduce_max, reduce_mean, reduce_sum, sqrt, square)

__getattr__ = unsupported_getattr("tf.math")
__all__ = ["abs", "add", "add_n", "argmax", "equal", "exp", "greater", "greater_equal", "less", "less_equal",
           "maximum", "minimum", "not_equal", "reduce_max", "reduce_mean", "reduce_sum", "sqrt", "square"]
