"""tf.Tensor, tf.Variable, tf.GradientTape, tf.function and the tf.* ops a custom loop uses, on
lockstep's C++ tensors (each op releases the GIL while it computes)."""
import functools

import numpy as np

from . import _lockstep
from ._support import refuse_arguments

Tensor = _lockstep.Tensor
Variable = _lockstep.Variable

# tf.float32 and the other dtypes lockstep has: their NumPy names, as Tensor.dtype gives them.
float32, float16, bfloat16, int32, int64, uint8 = "float32", "float16", "bfloat16", "int32", "int64", "uint8"


def _dtype_name(dtype):
    return None if dtype is None else getattr(dtype, "name", None) or str(dtype)


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    return _lockstep.convert_to_tensor(value, _dtype_name(dtype))


def constant(value, dtype=None, shape=None, name=None):
    refuse_arguments("tf.constant", shape=shape)
    return convert_to_tensor(value, dtype)


def cast(x, dtype, name=None):
    return _lockstep.cast(x, _dtype_name(dtype))


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    return _lockstep.reduce_sum(input_tensor, axis, keepdims)


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    return _lockstep.reduce_mean(input_tensor, axis, keepdims)


def reduce_max(input_tensor, axis=None, keepdims=False, name=None):
    if axis is None:
        return _lockstep.reduce_max(reshape(input_tensor, [-1]), 0, False)
    return _lockstep.reduce_max(input_tensor, axis, keepdims)


def argmax(input, axis=None, output_type=int64, name=None):  # noqa: A002 (TensorFlow's name)
    return cast(_lockstep.argmax(input, 0 if axis is None else axis), output_type)


def reshape(tensor, shape, name=None):
    return _lockstep.reshape(tensor, [int(d) for d in shape])


def where(condition, x=None, y=None, name=None):
    """tf.where(condition, x, y): x where condition holds (nonzero), else y, broadcast over all three; the
    gradient goes to the side chosen. A NumPy bool condition is taken as uint8."""
    if x is None or y is None:
        raise ValueError("lockstep supports tf.where(condition, x, y) only; tf.where(condition) (the indices where "
                         "it holds) is not supported yet")
    if not isinstance(condition, (Tensor, Variable)):
        condition = np.asarray(condition)
        if condition.dtype == np.bool_:
            condition = condition.astype(np.uint8)
    return _lockstep.where(condition, x, y)


def add_n(inputs, name=None):
    return functools.reduce(lambda a, b: a + b, inputs)


add, maximum, minimum, matmul = _lockstep.add, _lockstep.maximum, _lockstep.minimum, _lockstep.matmul
# Comparisons give uint8 0 / 1 where TensorFlow gives bool: tf.cast(tf.equal(a, b), tf.float32) as in TF.
equal, not_equal, less, less_equal, greater, greater_equal = (_lockstep.equal, _lockstep.not_equal, _lockstep.less,
                                                              _lockstep.less_equal, _lockstep.greater,
                                                              _lockstep.greater_equal)
square, sqrt, exp, abs, stop_gradient = (_lockstep.square, _lockstep.sqrt, _lockstep.exp, _lockstep.abs,  # noqa: A001
                                         _lockstep.stop_gradient)


class GradientTape:
    """tf.GradientTape: records the ops of the thread that enters it (inside strategy.run, the
    replica's); gradient() may be called after the `with` block, as in TensorFlow."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        refuse_arguments("tf.GradientTape", watch_accessed_variables=None if watch_accessed_variables else True)
        self._tape = _lockstep.GradientTape(persistent)

    def __enter__(self):
        self._tape.enter()
        return self

    def __exit__(self, *exc):
        self._tape.exit()
        return False

    def watch(self, tensor):
        for t in tensor if isinstance(tensor, (list, tuple)) else [tensor]:
            self._tape.watch(t)

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=None):
        refuse_arguments("tf.GradientTape.gradient", unconnected_gradients=None if unconnected_gradients in
                         (None, "none") else unconnected_gradients)
        if isinstance(sources, dict):
            grads = self._tape.gradient(target, list(sources.values()), output_gradients)
            return dict(zip(sources.keys(), grads))
        if isinstance(sources, (list, tuple)):
            return self._tape.gradient(target, list(sources), output_gradients)
        return self._tape.gradient(target, [sources], output_gradients)[0]


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_implements=None, experimental_autograph_options=None, experimental_attributes=None,
             experimental_relax_shapes=None, experimental_compile=None, experimental_follow_type_hints=None,
             name=None):
    """tf.function: lockstep runs the function as it is (its ops are C++ already); the tracing
    options are accepted and have nothing to do."""

    def decorate(f):
        @functools.wraps(f)
        def run(*args, **kwargs):
            return f(*args, **kwargs)

        run.python_function = f
        return run

    return decorate if func is None else decorate(func)
