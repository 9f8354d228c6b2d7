"""keras.metrics: stateful metrics on lockstep's (update_state / result / reset_state, also inside
strategy.run, where each replica adds to its own share); compile takes them by their names."""
from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr
from ..ops import constant, float32

__getattr__ = unsupported_getattr("tf.keras.metrics")


class Metric:
    _class_name = None  # lockstep's metric class

    def __init__(self, name, dtype=None):
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
    _class_name = "Mean"

    def __init__(self, name="mean", dtype=None):
        super().__init__(name)

    def update_state(self, values, sample_weight=None):
        super().update_state(values, None, sample_weight)


class SparseCategoricalAccuracy(Metric):
    _class_name = "SparseCategoricalAccuracy"

    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(name)


class Accuracy(Metric):
    _class_name = "Accuracy"

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(name)
