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


class CategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="categorical_crossentropy"):
        refuse_arguments("keras.losses.CategoricalCrossentropy", label_smoothing=label_smoothing or None,
                         axis=None if axis == -1 else axis)
        super().__init__("categorical_crossentropy", from_logits, reduction)


class BinaryCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="binary_crossentropy"):
        refuse_arguments("keras.losses.BinaryCrossentropy", label_smoothing=label_smoothing or None,
                         axis=None if axis == -1 else axis)
        super().__init__("binary_crossentropy", from_logits, reduction)


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
