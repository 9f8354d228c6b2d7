"""keras.losses: the losses lockstep has, by Keras' class or function name."""
from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.keras.losses")


class Reduction:
    """tf.keras.losses.Reduction (Keras 2's names; Keras 3 takes the strings)."""
    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"


_REDUCTIONS = ("auto", "sum_over_batch_size", "sum", "none", None)


class Loss:
    def __init__(self, name, from_logits=False, reduction="sum_over_batch_size", **kwargs):
        refuse_arguments(f"keras.losses.{type(self).__name__}", **kwargs)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"keras.losses.{type(self).__name__}: reduction must be one of {_REDUCTIONS[:4]}, "
                             f"not {reduction!r}")
        self.name = name
        self.reduction = reduction or "none"
        self._loss = _lockstep.make_loss(name, from_logits)

    def __call__(self, y_true, y_pred, sample_weight=None):
        """The loss of a batch as Keras 3's Loss computes it: the loss of each example, or of each
        step of a sequence (y_pred (batch, steps, ..., k): shape (batch, steps, ...)), times
        sample_weight (one weight per example, shape (batch,) or (batch, 1); one per step, the
        losses' shape; or a scalar) and by y_pred's Keras mask (a model's output of padded
        sequences: the padded steps weigh 0), then with reduction "none" those values, "sum" their
        sum, and "sum_over_batch_size" their sum over their number (not over the weights' sum; with
        a mask, over the steps it keeps)."""
        return _lockstep.loss_call(self._loss, y_true, y_pred, sample_weight, self.reduction)


class SparseCategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, ignore_class=None, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy"):
        refuse_arguments("keras.losses.SparseCategoricalCrossentropy", ignore_class=ignore_class)
        super().__init__("sparse_categorical_crossentropy", from_logits, reduction)


class _LabelCrossentropy(Loss):
    """Categorical and binary cross-entropy: Keras' label_smoothing and axis are lockstep's 0 and -1 only."""

    def __init__(self, name, from_logits, label_smoothing, axis, reduction):
        refuse_arguments(f"keras.losses.{type(self).__name__}", label_smoothing=label_smoothing or None,
                         axis=None if axis == -1 else axis)
        super().__init__(name, from_logits, reduction)


class CategoricalCrossentropy(_LabelCrossentropy):
    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="categorical_crossentropy"):
        super().__init__("categorical_crossentropy", from_logits, label_smoothing, axis, reduction)


class BinaryCrossentropy(_LabelCrossentropy):
    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="binary_crossentropy"):
        super().__init__("binary_crossentropy", from_logits, label_smoothing, axis, reduction)


class MeanSquaredError(Loss):
    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error"):
        super().__init__("mean_squared_error", False, reduction)


def get(identifier):
    """The native loss for a keras.losses object or a Keras name ("sparse_categorical_crossentropy")."""
    if isinstance(identifier, Loss):
        if identifier.reduction not in ("auto", "sum_over_batch_size"):
            raise ValueError(f"lockstep does not support compiling a loss with reduction={identifier.reduction!r} "
                             f"yet (fit averages over the batch)")
        return identifier._loss
    if isinstance(identifier, str):
        return _lockstep.make_loss(identifier, False)
    raise ValueError(f"lockstep does not support the loss {identifier!r} yet (give a name or a keras.losses object)")
