"""tf.distribute: strategies on lockstep's C++ strategies."""
import contextlib

from . import _lockstep
from ._support import refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.distribute")

# The strategies whose scope is open, innermost last (models made now keep theirs alive).
_open_scopes = []


def current_strategy():
    """The strategy whose scope() is open, or None."""
    return _open_scopes[-1] if _open_scopes else None


class Strategy:
    def __init__(self, strategy):
        self._strategy = strategy

    @property
    def num_replicas_in_sync(self):
        return self._strategy.num_replicas_in_sync

    @property
    def extended(self):
        raise AttributeError("lockstep does not support tf.distribute.Strategy.extended yet")

    @contextlib.contextmanager
    def scope(self):
        """Variables (models) made while it is open are mirrored on every replica."""
        self._strategy.enter_scope()
        _open_scopes.append(self)
        try:
            yield self
        finally:
            _open_scopes.pop()
            self._strategy.exit_scope()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.distribute.{type(self).__name__}.{name} yet")

    def __repr__(self):
        return f"<lockstep.distribute.{type(self).__name__} on {', '.join(self._strategy.devices)}>"


class MirroredStrategy(Strategy):
    """tf.distribute.MirroredStrategy: one replica per device (default: every GPU, else one
    logical CPU device per core), in sync."""

    def __init__(self, devices=None, cross_device_ops=None):
        refuse_arguments("tf.distribute.MirroredStrategy", cross_device_ops=cross_device_ops)
        super().__init__(_lockstep.mirrored_strategy(list(devices or [])))


class OneDeviceStrategy(Strategy):
    def __init__(self, device):
        super().__init__(_lockstep.one_device_strategy(device.lower().replace("/", "").replace("device:", "")))


class MultiWorkerMirroredStrategy(Strategy):
    """Under mpirun each rank is a worker; otherwise a MirroredStrategy on one worker."""

    def __init__(self, communication_options=None, cluster_resolver=None):
        refuse_arguments("tf.distribute.MultiWorkerMirroredStrategy", communication_options=communication_options,
                         cluster_resolver=cluster_resolver)
        super().__init__(_lockstep.multi_worker_mirrored_strategy())
