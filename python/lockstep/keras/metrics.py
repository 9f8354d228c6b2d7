"""keras.metrics: stateful metrics on lockstep's (update_state / result / reset_state, also inside
strategy.run, where each replica adds to its own share); compile takes them by their names."""
from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr
from ..ops import constant, float32

__getattr__ = unsupported_getattr("tf.keras.metrics")


class Metric:
    _class_name = None  # lockstep's metric class
    _keras_name = None  # the name Keras gives it by default

    def __init__(self, name=None, dtype=None):
        name = self._keras_name if name is None else name
        self.name = name
        self._metric = _lockstep.make_metric(self._class_name, name)

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        refuse_arguments(f"keras.metrics.{type(self).__name__}.update_state", sample_weight=sample_weight)
        self._metric.update_state(y_true, y_pred)

    def result(self):
        return constant(self._metric.result(), float32)

    def reset_state(self):
        self._metric.reset_state()

    reset_states = reset_state

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()


class Mean(Metric):
    """The running mean of the values given (every element of each tensor)."""
    _class_name, _keras_name = "Mean", "mean"

    def update_state(self, values, sample_weight=None):
        super().update_state(values, None, sample_weight)


class SparseCategoricalAccuracy(Metric):
    _class_name, _keras_name = "SparseCategoricalAccuracy", "sparse_categorical_accuracy"


class Accuracy(Metric):
    _class_name, _keras_name = "Accuracy", "accuracy"


class CategoricalAccuracy(Metric):
    """Whether each row's top class is its one-hot target's (integer labels: SparseCategoricalAccuracy)."""
    _class_name, _keras_name = "CategoricalAccuracy", "categorical_accuracy"


class MeanAbsoluteError(Metric):
    _class_name, _keras_name = "MeanAbsoluteError", "mean_absolute_error"


class MeanSquaredError(Metric):
    _class_name, _keras_name = "MeanSquaredError", "mean_squared_error"
