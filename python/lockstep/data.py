"""tf.data: Dataset on lockstep's C++ input pipeline (it runs outside the GIL)."""
import numpy as np

from . import _lockstep
from ._support import host_array, refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.data")

AUTOTUNE = _lockstep.AUTOTUNE
INFINITE_CARDINALITY = _lockstep.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY = _lockstep.UNKNOWN_CARDINALITY


class ElementArray(np.ndarray):
    """A dataset element's component as iteration gives it: a NumPy array with EagerTensor's numpy()."""

    def numpy(self):
        return self.view(np.ndarray)


def _flatten(value):
    """(spec, leaves) of an element as tf.nest flattens it: a tuple's or dict's nesting (a dict's keys
    sorted) and its leaves in that order; spec None for a leaf (a list is a leaf, as TensorFlow stacks it)."""
    if isinstance(value, (tuple, dict)):
        keys = sorted(value) if isinstance(value, dict) else None
        specs, leaves = [], []
        for v in ([value[k] for k in keys] if keys is not None else value):
            spec, more = _flatten(v)
            specs.append(spec)
            leaves += more
        return (("dict", keys, specs) if keys is not None else ("tuple", specs)), leaves
    return None, [value]


def structure_of(value):
    """(structure, leaves): "single" for one component, "tuple" for a flat tuple, else the nesting spec."""
    spec, leaves = _flatten(value)
    if spec is None:
        return "single", leaves
    if spec[0] == "tuple" and all(s is None for s in spec[1]):
        return "tuple", leaves
    return spec, leaves


def pack(structure, components):
    """An element for Python from its flat components, nested as `structure` says."""
    if structure == "tuple":
        return tuple(components)
    if structure == "single":
        return components[0]
    it = iter(components)

    def build(spec):
        if spec is None:
            return next(it)
        if spec[0] == "tuple":
            return tuple(build(s) for s in spec[1])
        return {k: build(s) for k, s in zip(spec[1], spec[2])}

    return build(structure)


class Dataset:
    """tf.data.Dataset: each transformation returns a new Dataset."""

    def __init__(self, dataset, structure="tuple"):
        self._ds = dataset
        # How elements come back to Python: "tuple", "single" or a nesting spec (structure_of). A
        # list holding it, shared by the datasets made from this one: after a map, its function's
        # first result tells, and then runs the checks waiting for it (when_structure_known).
        self._structure_cell = structure if isinstance(structure, list) else [structure, []]

    def when_structure_known(self, check):
        """check(structure) now, or, where a map's function has not yet run, when its first result
        tells the structure (on the pipeline's thread: what it raises ends the pass, as the function's)."""
        if self._structure is None:
            self._structure_cell[1].append(check)
        else:
            check(self._structure)

    @property
    def _structure(self):
        return self._structure_cell[0]

    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """Tensors, a tuple or a dict of them, nested as tf.nest nests (a dict flat in its keys' order:
        the order in which a model of several inputs or outputs takes them where they are a dict)."""
        structure, leaves = structure_of(tensors)
        arrays = [host_array(t, "tf.data.Dataset.from_tensor_slices") for t in leaves]
        return Dataset(_lockstep.Dataset.from_tensor_slices(arrays), structure)

    @staticmethod
    def range(*args):
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
        return Dataset(_lockstep.Dataset.range(start, stop, step), "single")

    def _new(self, dataset):
        return Dataset(dataset, self._structure_cell)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None, name=None):
        # seed None: lockstep's default seed (0), so runs are reproducible.
        return self._new(self._ds.shuffle(buffer_size, 0 if seed is None else seed,
                                          True if reshuffle_each_iteration is None else reshuffle_each_iteration))

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        return self._new(self._ds.batch(batch_size, drop_remainder))

    def repeat(self, count=None, name=None):
        return self._new(self._ds.repeat(-1 if count is None else count))

    def take(self, count, name=None):
        return self._new(self._ds.take(count))

    def skip(self, count, name=None):
        return self._new(self._ds.skip(count))

    def shard(self, num_shards, index, name=None):
        return self._new(self._ds.shard(num_shards, index))

    def unbatch(self, name=None):
        return self._new(self._ds.unbatch())

    def concatenate(self, dataset, name=None):
        return self._new(self._ds.concatenate(dataset._ds))

    def cache(self, filename="", name=None):
        return self._new(self._ds.cache(filename) if filename else self._ds.cache())

    def prefetch(self, buffer_size, name=None):
        return self._new(self._ds.prefetch(buffer_size))

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """map_func on every element, called with its components (tf.Tensor) as arguments, on the
        pipeline's threads (num_parallel_calls of them at once, or AUTOTUNE), which take turns with
        the GIL; it returns a tensor, NumPy array or number, or a tuple or dict of them. An exception it
        raises ends the pass and is raised by whatever iterates, as it was."""
        structure, result = self._structure_cell, [None, []]

        def call(components):
            element = pack(structure[0], components)
            out = map_func(*element) if isinstance(element, tuple) else map_func(element)
            known, leaves = structure_of(out)
            if result[0] is None:
                result[0] = known
                checks, result[1] = result[1], []
                for check in checks:
                    check(known)
            return tuple(leaves)

        calls = 1 if num_parallel_calls is None else int(num_parallel_calls)
        return Dataset(self._ds.map_python(call, calls, True if deterministic is None else bool(deterministic)),
                       result)

    def cardinality(self):
        return self._ds.cardinality()

    def __len__(self):
        """TensorFlow's len(dataset): its cardinality where known and finite, else a TypeError."""
        n = self._ds.cardinality()
        if n < 0:
            raise TypeError("The dataset is infinite." if n == INFINITE_CARDINALITY else
                            "The dataset length is unknown.")
        return n

    def __iter__(self):
        """Each element as NumPy arrays that also answer TensorFlow's .numpy() (a program's
        `for images, labels in ds.take(1): images.numpy()`); == and the rest are NumPy's, elementwise
        as TensorFlow's."""
        for element in self._ds:
            yield pack(self._structure, [a.view(ElementArray) for a in element])

    def as_numpy_iterator(self):
        """Each element as plain NumPy arrays."""
        for element in self._ds:
            yield pack(self._structure, element)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.data.Dataset.{name} yet")

