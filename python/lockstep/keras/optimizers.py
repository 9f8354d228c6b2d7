"""keras.optimizers: SGD, Adam, AdamW and RMSprop on lockstep's optimizers."""
import json
import numbers
import operator

import numpy as np

from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr
from . import schedules

__getattr__ = unsupported_getattr("tf.keras.optimizers")


class Optimizer:
    def __init__(self, class_name, learning_rate, clipnorm=None, clipvalue=None, global_clipnorm=None, **rule):
        if isinstance(learning_rate, schedules.LearningRateSchedule):
            learning_rate = schedules.native_of(learning_rate, f"keras.optimizers.{class_name}")
        elif isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real):
            raise ValueError(f"keras.optimizers.{class_name}: lockstep takes a learning_rate that is a number or a "
                             f"keras.optimizers.schedules schedule, not {type(learning_rate).__name__}")
        else:
            learning_rate = float(learning_rate)
        config = {"learning_rate": learning_rate, "clipnorm": clipnorm, "clipvalue": clipvalue,
                  "global_clipnorm": global_clipnorm, **rule}
        self._optimizer = _lockstep.make_optimizer(class_name, json.dumps(config))

    @classmethod
    def _of(cls, native):
        """The keras.optimizers object of a C++ optimizer (a loaded model's, for model.optimizer)."""
        optimizer = cls.__new__(cls)
        optimizer._optimizer = native
        return optimizer

    @property
    def learning_rate(self):
        """The rate the next update uses (a schedule's at iterations), as Keras 3's variable: float(),
        .numpy(), .assign(x), NumPy and arithmetic; it reads the optimizer each time it is used."""
        return LearningRate(self)

    @learning_rate.setter
    def learning_rate(self, value):
        # Keras' optimizer.learning_rate = x (a callback's, between epochs). An optimizer made with a
        # schedule keeps it: the C++ optimizer refuses the rate with Keras 3's TypeError and message.
        if isinstance(value, LearningRate):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"keras.optimizers.Optimizer.learning_rate: lockstep takes a number, not "
                             f"{type(value).__name__}")
        self._optimizer.learning_rate = float(value)

    @property
    def iterations(self):
        return _lockstep.optimizer_iterations(self._optimizer)

    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
        """Inside strategy.run the gradients are all-reduced across the replicas first (TensorFlow's
        merge_call) and the step counted once; a None gradient counts as zeros."""
        refuse_arguments("keras.optimizers.Optimizer.apply_gradients",
                         skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)
        pairs = list(grads_and_vars)
        _lockstep.apply_gradients(self._optimizer, [g for g, _ in pairs], [v for _, v in pairs])


class LearningRate:
    """optimizer.learning_rate: what Keras users do with Keras 3's learning-rate variable, on the
    optimizer's current rate. Arithmetic and comparisons give Python's numbers (the rate as a float);
    numpy() and np.asarray give float32, Keras' dtype."""
    __slots__ = ("_owner",)
    __hash__ = None  # it compares by value, which assign changes

    def __init__(self, owner):
        self._owner = owner

    def __float__(self):
        return float(self._owner._optimizer.learning_rate)

    def numpy(self):
        return np.float32(float(self))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype=dtype)

    def assign(self, value):
        """optimizer.learning_rate.assign(x): as optimizer.learning_rate = x (refused by Keras' TypeError
        where the optimizer runs a schedule)."""
        self._owner.learning_rate = value
        return self

    def __round__(self, ndigits=None):
        return round(float(self), ndigits)

    def __format__(self, spec):
        return format(float(self), spec)

    def __repr__(self):
        return f"<learning_rate={float(self)!r}>"

    def __bool__(self):
        return bool(float(self))

    def __neg__(self):
        return -float(self)


def _number_op(op, reflected=False):
    def method(self, other):
        if isinstance(other, LearningRate):
            other = float(other)
        elif isinstance(other, bool) or not isinstance(other, numbers.Real):
            return NotImplemented
        return op(other, float(self)) if reflected else op(float(self), other)
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
    setattr(LearningRate, f"__{_name}__", _number_op(getattr(operator, _name)))
    setattr(LearningRate, f"__r{_name}__", _number_op(getattr(operator, _name), reflected=True))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(LearningRate, f"__{_name}__", _number_op(getattr(operator, _name)))


class SGD(Optimizer):
    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, use_ema=False, name="SGD", **kwargs):
        refuse_arguments("keras.optimizers.SGD", weight_decay=weight_decay, use_ema=use_ema, **kwargs)
        super().__init__("SGD", learning_rate, clipnorm, clipvalue, global_clipnorm, momentum=momentum,
                         nesterov=nesterov)


class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False, name="adam", **kwargs):
        refuse_arguments("keras.optimizers.Adam", amsgrad=amsgrad, weight_decay=weight_decay, use_ema=use_ema,
                         **kwargs)
        super().__init__("Adam", learning_rate, clipnorm, clipvalue, global_clipnorm, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon)


class AdamW(Optimizer):
    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False, name="adamw",
                 **kwargs):
        refuse_arguments("keras.optimizers.AdamW", amsgrad=amsgrad, use_ema=use_ema, **kwargs)
        super().__init__("AdamW", learning_rate, clipnorm, clipvalue, global_clipnorm, weight_decay=weight_decay,
                         beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


class RMSprop(Optimizer):
    """Keras 3's RMSprop, the optimizer of compile() given none: slots velocity, momentum (momentum > 0)
    and average_gradient (centered), as Keras names its variables."""
    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False, name="rmsprop", **kwargs):
        refuse_arguments("keras.optimizers.RMSprop", weight_decay=weight_decay, use_ema=use_ema, **kwargs)
        super().__init__("RMSprop", learning_rate, clipnorm, clipvalue, global_clipnorm, rho=rho, momentum=momentum,
                         epsilon=epsilon, centered=centered)


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}


def get(identifier):
    """The native optimizer for a keras.optimizers object or a name ("adam")."""
    if isinstance(identifier, Optimizer):
        return identifier._optimizer
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()._optimizer
    raise ValueError(f"lockstep does not support the optimizer {identifier!r} yet (it has SGD, Adam, AdamW, RMSprop)")
