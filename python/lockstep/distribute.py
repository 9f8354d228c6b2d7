"""tf.distribute: strategies on lockstep's C++ strategies."""
import contextlib

from . import _lockstep
from ._support import refuse_arguments, unsupported_getattr
from .data import Dataset, pack

__getattr__ = unsupported_getattr("tf.distribute")
InputContext = _lockstep.InputContext  # what distribute_datasets_from_function's function gets

# The strategies whose scope is open, innermost last (models made now keep theirs alive).
_open_scopes = []
# The strategy whose run() is in progress (its replica functions are running), or None.
_running = None


class ReduceOp:
    """tf.distribute.ReduceOp."""
    SUM = "sum"
    MEAN = "mean"


class PerReplica:
    """tf.distribute's PerReplica: one value per local replica, in replica order (.values)."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return "PerReplica:{" + ", ".join(f"{i}: {v!r}" for i, v in enumerate(self.values)) + "}"


class DistributedDataset:
    """What experimental_distribute_dataset returns: iterating gives each step's global batch, which
    strategy.run splits over the replicas."""

    def __init__(self, native, dataset):
        self._ds = native
        self._dataset = dataset

    def __iter__(self):
        for batch in self._ds:
            yield DistributedValues(batch, self._dataset._structure)


class DistributedValues:
    """One step's input from a DistributedDataset; in strategy.run each replica gets its slice."""

    def __init__(self, batch, structure):
        self._batch = batch
        self._structure = structure

    def _slice(self, components):
        return pack(self._structure, components)


def running_strategy():
    """The strategy whose run() is in progress, or None."""
    return _running


def _per_replica(results):
    """TensorFlow's result of run(): None, one replica's value as it is, else PerReplica values
    (a tuple or dict of them where the function returns a tuple or dict)."""
    first = results[0]
    if first is None:
        return None
    if len(results) == 1:
        return first
    if isinstance(first, tuple):
        return tuple(PerReplica(r[i] for r in results) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: PerReplica(r[k] for r in results) for k in first}
    return PerReplica(results)


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

    def experimental_distribute_dataset(self, dataset, options=None):
        refuse_arguments(f"tf.distribute.{type(self).__name__}.experimental_distribute_dataset", options=options)
        return DistributedDataset(_lockstep.experimental_distribute_dataset(self._strategy, dataset._ds), dataset)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(input_context) returns a dataset of per-replica batches (batch it with
        input_context.get_per_replica_batch_size(global_batch_size)); each step gives every replica
        the next one. Under several workers it runs once per worker: shard by input_pipeline_id."""
        refuse_arguments(f"tf.distribute.{type(self).__name__}.distribute_datasets_from_function", options=options)
        made = []

        def native(context):
            dataset = dataset_fn(context)
            if not isinstance(dataset, Dataset):
                raise ValueError(f"distribute_datasets_from_function: the function must return a tf.data.Dataset, "
                                 f"not {type(dataset).__name__}")
            made.append(dataset)
            return dataset._ds

        distributed = _lockstep.distribute_datasets_from_function(self._strategy, native)
        return DistributedDataset(distributed, made[0])

    def run(self, fn, args=(), kwargs=None, options=None):
        """fn(*args, **kwargs) on every replica, each on its own thread: a DistributedValues argument
        becomes the replica's slice of the batch, a PerReplica one its own value."""
        refuse_arguments(f"tf.distribute.{type(self).__name__}.run", options=options)
        kwargs = kwargs or {}
        batches = [a for a in list(args) + list(kwargs.values()) if isinstance(a, DistributedValues)]
        if len(batches) > 1 and any(b is not batches[0] for b in batches):
            raise ValueError("lockstep's strategy.run takes one batch of a distributed dataset per call")

        def on_replica(replica, components):
            def local(a):
                if isinstance(a, DistributedValues):
                    return a._slice(components)
                return a.values[replica] if isinstance(a, PerReplica) else a

            return fn(*[local(a) for a in args], **{k: local(v) for k, v in kwargs.items()})

        global _running
        previous, _running = _running, self
        try:
            results = _lockstep.run_on_replicas(self._strategy, on_replica, batches[0]._batch if batches else None)
        finally:
            _running = previous
        return _per_replica(results)

    def reduce(self, reduce_op, value, axis=None):
        """Across the replicas (and along `axis` of each value, as TensorFlow); a value that is
        not per-replica counts as the same value on every replica."""
        op = _op_name(reduce_op)
        values = value.values if isinstance(value, PerReplica) else [value] * len(self._strategy.devices)
        return _lockstep.reduce(self._strategy, op, list(values), axis)

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


class ReplicaContext:
    """tf.distribute.ReplicaContext: inside strategy.run, the replica's; outside any strategy, the
    default one (one replica)."""

    def __init__(self, strategy, replica_id_in_sync_group, num_replicas_in_sync):
        self.strategy = strategy
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def all_reduce(self, reduce_op, value, options=None):
        """The value summed (or averaged) over every replica in sync; each replica must call it."""
        refuse_arguments("tf.distribute.ReplicaContext.all_reduce", options=options)
        if _lockstep.replica_ids() is None:  # the default replica context: one replica
            return value
        return _lockstep.replica_all_reduce(_op_name(reduce_op), value)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.distribute.ReplicaContext.{name} yet")


class _DefaultStrategy:
    """TensorFlow's default strategy (no tf.distribute strategy in use): one replica, the program's
    own thread; scope() does nothing and run() calls the function."""
    num_replicas_in_sync = 1

    @contextlib.contextmanager
    def scope(self):
        yield self

    def run(self, fn, args=(), kwargs=None, options=None):
        refuse_arguments("tf.distribute.get_strategy().run", options=options)
        return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        if axis is None:
            return value
        from . import ops
        return (ops.reduce_sum if _op_name(reduce_op) == "sum" else ops.reduce_mean)(value, axis)

    def experimental_distribute_dataset(self, dataset, options=None):
        refuse_arguments("tf.distribute.get_strategy().experimental_distribute_dataset", options=options)
        return dataset

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support {name} of tf.distribute's default strategy yet")


_default_strategy = _DefaultStrategy()


def _op_name(reduce_op):
    op = getattr(reduce_op, "value", reduce_op)
    return op.lower() if isinstance(op, str) else op


def get_strategy():
    """The strategy of the run() in progress, else the one whose scope() is open, else the default."""
    return _running or current_strategy() or _default_strategy


def has_strategy():
    return (_running or current_strategy()) is not None


def get_replica_context():
    """Inside strategy.run: this replica's context; in a strategy's scope (cross-replica): None;
    elsewhere the default strategy's one replica."""
    ids = _lockstep.replica_ids()
    if ids is not None:
        return ReplicaContext(_running, *ids)
    if current_strategy() is not None or _running is not None:
        return None
    return ReplicaContext(_default_strategy, 0, 1)


def in_cross_replica_context():
    return _lockstep.replica_ids() is None and has_strategy()
