"""What every module of the package shares: the message for a name lockstep lacks, and NumPy input."""
import sys

import numpy as np


def unsupported_getattr(qualname):
    """A module __getattr__ that names what lockstep does not have (e.g. tf.keras.layers.LSTM)."""

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support {qualname}.{name} yet")

    return __getattr__


def refuse_arguments(qualname, **arguments):
    """Arguments lockstep does not have may only be given as Keras' "off" (None or False)."""
    for name, value in arguments.items():
        if value is not None and value is not False:
            raise ValueError(f"lockstep does not support the argument {name}={value!r} of {qualname} yet")


def training_argument(qualname, training):
    """Keras' training= of a call: True, False or None (NumPy's bool too); anything else is a
    TypeError naming it, where Keras would take any truthy value for True."""
    if training is None or isinstance(training, (bool, np.bool_)):
        return None if training is None else bool(training)
    raise TypeError(f"{qualname}: training must be True, False or None, got {training!r} "
                    f"({type(training).__name__})")


def host_array(value, what):
    """A C-contiguous NumPy array of a dtype lockstep has: float64 becomes float32 (Keras' floatx),
    bool becomes uint8; anything else is passed on and refused by the C++ side by name."""
    a = np.asarray(value)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    elif a.dtype == np.bool_:
        a = a.astype(np.uint8)
    if a.dtype == object or a.dtype.kind in "USV":  # objects, strings, bytes, raw records
        raise ValueError(f"{what}: expected a numeric array, got {a.dtype.name if a.dtype != object else 'objects'} "
                         f"of type {type(value).__name__}")
    return np.require(a, requirements="C")  # (np.ascontiguousarray would make a scalar 1-D)


def in_jupyter_kernel():
    """Whether this process is a Jupyter kernel, whose stdout is a pipe that the notebook renders
    with carriage returns: Keras' progress bar redraws in place there, as on a terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return getattr(shell, "kernel", None) is not None
