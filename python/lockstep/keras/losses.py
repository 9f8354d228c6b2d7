"""keras.losses: the losses lockstep has, by Keras' class or function name."""
from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.keras.losses")


class Loss:
    def __init__(self, name, from_logits=False, reduction="sum_over_batch_size", **kwargs):
        refuse_arguments(f"keras.losses.{type(self).__name__}", **kwargs,
                         reduction=None if reduction in ("sum_over_batch_size", "auto") else reduction)
        self.name = name
        self._loss = _lockstep.make_loss(name, from_logits)


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
        return identifier._loss
    if isinstance(identifier, str):
        return _lockstep.make_loss(identifier, False)
    raise ValueError(f"lockstep does not support the loss {identifier!r} yet (give a name or a keras.losses object)")
