"""keras.optimizers.schedules: Keras 3's ExponentialDecay, PiecewiseConstantDecay, CosineDecay and
PolynomialDecay, with Keras' arguments, defaults and configs. Each is lockstep's C++ schedule
(optimizers/schedules.hpp), made from the config Keras would save: an optimizer given one runs it
in C++ at every step (in fit's captured step too), and schedule(step) asks the same function."""
import inspect
import json
import numbers
import operator

from .. import _lockstep
from .._support import unsupported_getattr
from ..ops import constant, float32

__getattr__ = unsupported_getattr("tf.keras.optimizers.schedules")


class LearningRateSchedule:
    """Keras' base class. lockstep's optimizers run its built-in subclasses only: a schedule of one's
    own (a Python __call__) given as a learning_rate is refused by name (use a
    keras.callbacks.LearningRateScheduler, which sets the rate at each epoch's start)."""

    def __call__(self, step):
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override "
                                  f"`__call__(self, step)`.")

    def get_config(self):
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override `get_config()` "
                                  f"in order to be serializable.")

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _Builtin(LearningRateSchedule):
    """A class lockstep runs in C++. Its __init__ has Keras' signature and hands _made() its
    arguments: they become attributes, get_config gives them (in the signature's order, as Keras'),
    and C++ makes the schedule from that config, refusing a bad one by class and argument."""

    def _made(self, arguments):
        names = list(inspect.signature(_builtin_class(self).__init__).parameters)[1:]
        for name in names:
            setattr(self, name, arguments[name])
        self._names = names
        steps = getattr(self, "decay_steps", None)
        if isinstance(steps, numbers.Real) and steps <= 0:  # Keras' own check and message
            raise ValueError(f"Argument `decay_steps` must be > 0. Received: decay_steps={self.decay_steps}")
        self._schedule = _lockstep.make_schedule(json.dumps(_native_config(self), default=_plain))

    def get_config(self):
        return {name: getattr(self, name) for name in self._names}

    def __call__(self, step):
        """The rate at optimizer step `step` (updates applied before it), a float32 scalar as Keras'."""
        return constant(self._schedule(_step(step)), float32)


class ExponentialDecay(_Builtin):
    """initial_learning_rate * decay_rate ** (step / decay_steps), the exponent floored with staircase."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name="ExponentialDecay"):
        self._made(locals())


class PiecewiseConstantDecay(_Builtin):
    """values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
    values[-1] after the last boundary."""

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        if len(boundaries) != len(values) - 1:  # Keras' check and message
            raise ValueError(f"The length of boundaries should be 1 less than the length of values. Received: "
                             f"boundaries={boundaries} of length {len(boundaries)}, and values={values} of length "
                             f"{len(values)}.")
        self._made(locals())


class CosineDecay(_Builtin):
    """Half a cosine from the rate (warmup_target after a linear warmup of warmup_steps, where given)
    down to alpha times it over decay_steps, then flat."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay", warmup_target=None,
                 warmup_steps=0):
        self._made(locals())


class PolynomialDecay(_Builtin):
    """(initial_learning_rate - end_learning_rate) * (1 - step / decay_steps) ** power + end_learning_rate,
    the step held at decay_steps (with cycle, decay_steps grows to the first multiple >= step)."""

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                 name="PolynomialDecay"):
        self._made(locals())


_CLASSES = {c.__name__: c for c in (ExponentialDecay, PiecewiseConstantDecay, CosineDecay, PolynomialDecay)}


def serialize(learning_rate_schedule):
    """Keras' serialisation: what an optimizer's config and a saved model hold as its learning_rate."""
    if not isinstance(learning_rate_schedule, LearningRateSchedule):
        raise ValueError(f"keras.optimizers.schedules.serialize: expected a LearningRateSchedule, got "
                         f"{learning_rate_schedule!r}")
    return {"module": "keras.optimizers.schedules", "class_name": type(learning_rate_schedule).__name__,
            "config": learning_rate_schedule.get_config(), "registered_name": None}


def deserialize(config):
    """The schedule of a serialisation (serialize's, or an optimizer config's learning_rate)."""
    name = config.get("class_name") if isinstance(config, dict) else None
    if name not in _CLASSES:
        raise ValueError(f"lockstep does not support the learning-rate schedule {name or config!r} yet (it has "
                         f"{', '.join(_CLASSES)})")
    return _CLASSES[name].from_config(config.get("config", {}))


def _builtin_class(schedule):
    """The built-in class whose formula C++ runs for `schedule` (a subclass's nearest)."""
    return next(c for c in type(schedule).__mro__ if c in _CLASSES.values())


def _native_config(schedule):
    """Keras' serialisation under the built-in class's name, as C++ reads it."""
    return {**serialize(schedule), "class_name": _builtin_class(schedule).__name__}


def native_of(schedule, qualname):
    """The C++ schedule an optimizer runs: a built-in's config (C++ makes it again from that). A
    subclass whose own __call__ C++ would not run is one of one's own."""
    if not isinstance(schedule, _Builtin) or type(schedule).__call__ is not _Builtin.__call__:
        raise ValueError(f"{qualname}: lockstep does not support a learning_rate schedule of one's own "
                         f"({type(schedule).__name__}) yet: it runs {', '.join(_CLASSES)} of "
                         f"keras.optimizers.schedules, or a keras.callbacks.LearningRateScheduler per epoch")
    return json.loads(json.dumps(_native_config(schedule), default=_plain))


def _plain(value):
    """NumPy's scalars as JSON numbers (a config given np.float32(0.1) or np.int64(1000))."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _step(step):
    """A step as an integer: an int, a NumPy integer, or a number or scalar tensor of an integral value."""
    try:
        return operator.index(step)
    except TypeError:
        pass
    try:
        if isinstance(step, (str, bytes)):
            raise TypeError
        value = float(step)
    except (TypeError, ValueError):
        raise TypeError(f"a learning-rate schedule takes a step (an integer), not {type(step).__name__}") from None
    if not value.is_integer():
        raise ValueError(f"a learning-rate schedule's step must be an integer, got {value}")
    return int(value)
