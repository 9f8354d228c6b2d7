"""tf.nn: the ops and loss helpers a custom loop uses."""
from . import _lockstep, distribute
from ._support import unsupported_getattr
from .ops import reduce_sum

__getattr__ = unsupported_getattr("tf.nn")

relu, sigmoid, tanh = _lockstep.relu, _lockstep.sigmoid, _lockstep.tanh


def softmax(logits, axis=None, name=None):
    return _lockstep.softmax(logits, -1 if axis is None else axis)


def log_softmax(logits, axis=None, name=None):
    return _lockstep.log_softmax(logits, -1 if axis is None else axis)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    return _lockstep.sparse_softmax_cross_entropy_with_logits(labels, logits)


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """sum(per_example_loss * sample_weight) / global_batch_size (TensorFlow's: the weights, broadcast,
    multiply the losses; the divisor stays the number of examples); without global_batch_size,
    inside strategy.run the step's global batch size (exact for uneven splits), elsewhere
    TensorFlow's rule."""
    if sample_weight is not None:
        per_example_loss = per_example_loss * sample_weight
    return _lockstep.compute_average_loss(per_example_loss, None if global_batch_size is None
                                          else int(global_batch_size))


def scale_regularization_loss(regularization_loss):
    """The loss divided by the replicas in sync, inside strategy.run (as TensorFlow)."""
    strategy = distribute.running_strategy()
    loss = reduce_sum(regularization_loss)
    return loss if strategy is None else loss / strategy.num_replicas_in_sync
