"""keras.metrics: stateful metrics on lockstep's (update_state / result / reset_state, also inside
strategy.run, where each replica adds to its own share); compile takes them by their names. Each
class hands its Keras config to the C++ table of metrics (metrics::deserialize), which makes it
and refuses an option out of range by name."""
import json
import math
import numbers

from .. import _lockstep
from .._support import unsupported_getattr
from ..ops import constant, float32

__getattr__ = unsupported_getattr("tf.keras.metrics")


def _config_value(value):
    """A config value as JSON holds it: NumPy scalars as Python's; a NaN or an infinity as its
    repr, which JSON has no number for (the C++ refuses it by the option's name)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
        return value if math.isfinite(value) else repr(value)
    return value


def _dtype_name(dtype):
    if dtype is None or isinstance(dtype, str):
        return dtype
    return getattr(dtype, "name", None) or getattr(dtype, "__name__", str(dtype))


class Metric:
    _class_name = None  # Keras' class name, the C++ table's key

    def __init__(self, name=None, dtype=None, **options):
        config = {"dtype": _dtype_name(dtype), **{k: _config_value(v) for k, v in options.items()}}
        if name is not None:
            config["name"] = name
        self._metric = _lockstep.make_metric(self._class_name, json.dumps(config))

    @property
    def name(self):
        return self._metric.name

    def get_config(self):
        """Keras' config: name, dtype and the class's options (k, threshold)."""
        return json.loads(self._metric.get_config())

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        """Keras' arithmetic with sample_weight (one weight per example, or per position of a
        label per position): the mean of the values weighted, sum(w * value) / sum(w)."""
        self._metric.update_state(y_true, y_pred, sample_weight)

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

    def update_state(self, values, sample_weight=None):
        super().update_state(values, None, sample_weight)


class SparseCategoricalAccuracy(Metric):
    _class_name = "SparseCategoricalAccuracy"


class Accuracy(Metric):
    """How often y_pred equals y_true exactly, value by value (Keras' Accuracy: for predicted labels,
    not scores; compile's "accuracy" is the one that fits the loss)."""
    _class_name = "Accuracy"


class CategoricalAccuracy(Metric):
    """Whether each row's top class is its one-hot target's (integer labels: SparseCategoricalAccuracy)."""
    _class_name = "CategoricalAccuracy"


class BinaryAccuracy(Metric):
    """Whether y_pred > threshold equals y_true, value by value."""
    _class_name = "BinaryAccuracy"

    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        super().__init__(name, dtype, threshold=threshold)


class TopKCategoricalAccuracy(Metric):
    """Whether each one-hot target is among the k top scores (a tie with the k-th score is in)."""
    _class_name = "TopKCategoricalAccuracy"

    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None):
        super().__init__(name, dtype, k=k)


class SparseTopKCategoricalAccuracy(Metric):
    """Whether each integer label is among the k top scores (a tie with the k-th score is in)."""
    _class_name = "SparseTopKCategoricalAccuracy"

    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None, from_sorted_ids=False):
        super().__init__(name, dtype, k=k, from_sorted_ids=from_sorted_ids)


class MeanAbsoluteError(Metric):
    _class_name = "MeanAbsoluteError"


class MeanSquaredError(Metric):
    _class_name = "MeanSquaredError"
