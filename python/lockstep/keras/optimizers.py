"""keras.optimizers: SGD, Adam and AdamW on lockstep's optimizers."""
import json
import numbers

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
        """The rate the next update uses (a schedule's at iterations)."""
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        # Keras' optimizer.learning_rate = x (a callback's, between epochs). An optimizer made with a
        # schedule keeps it: Keras 3 refuses the rate so (its TypeError and message).
        if self._optimizer.has_schedule:
            raise TypeError("This optimizer was created with a `LearningRateSchedule` object as its `learning_rate` "
                            "constructor argument, hence its learning rate is not settable. If you need the learning "
                            "rate to be settable, you should instantiate the optimizer with a float `learning_rate` "
                            "argument.")
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


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW}


def get(identifier):
    """The native optimizer for a keras.optimizers object or a name ("adam")."""
    if isinstance(identifier, Optimizer):
        return identifier._optimizer
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()._optimizer
    raise ValueError(f"lockstep does not support the optimizer {identifier!r} yet (it has SGD, Adam, AdamW)")
