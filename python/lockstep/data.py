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


class Dataset:
    """tf.data.Dataset: each transformation returns a new Dataset."""

    def __init__(self, dataset, structure="tuple"):
        self._ds = dataset
        # How elements come back to Python: "tuple" or "single". A list holding it, shared by the
        # datasets made from this one: after a map, its function's first result tells.
        self._structure_cell = structure if isinstance(structure, list) else [structure]

    @property
    def _structure(self):
        return self._structure_cell[0]

    @staticmethod
    def from_tensor_slices(tensors, name=None):
        if isinstance(tensors, dict):
            raise ValueError("lockstep does not support tf.data.Dataset.from_tensor_slices of a dict yet")
        if isinstance(tensors, tuple):
            if any(isinstance(t, (tuple, dict)) for t in tensors):
                raise ValueError("lockstep does not support nested structures in tf.data.Dataset.from_tensor_slices "
                                 "yet (e.g. ((a, b), (c, d))): give a flat tuple; a model of several inputs and "
                                 "outputs takes (inputs..., targets...) in its inputs' and outputs' order")
            arrays = [host_array(t, "tf.data.Dataset.from_tensor_slices") for t in tensors]
            return Dataset(_lockstep.Dataset.from_tensor_slices(arrays), "tuple")
        array = host_array(tensors, "tf.data.Dataset.from_tensor_slices")
        return Dataset(_lockstep.Dataset.from_tensor_slices([array]), "single")

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
        the GIL; it returns a tensor, NumPy array or number, or a tuple of them. An exception it
        raises ends the pass and is raised by whatever iterates, as it was."""
        structure, result = self._structure_cell, [None]

        def call(components):
            out = map_func(*components) if structure[0] == "tuple" else map_func(components[0])
            if isinstance(out, dict):
                raise ValueError("lockstep does not support a tf.data.Dataset.map function returning a dict yet")
            result[0] = "tuple" if isinstance(out, tuple) else "single"
            return out if isinstance(out, tuple) else (out,)

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
            arrays = tuple(a.view(ElementArray) for a in element)
            yield arrays if self._structure == "tuple" else arrays[0]

    def as_numpy_iterator(self):
        """Each element as plain NumPy arrays."""
        for element in self._ds:
            yield tuple(element) if self._structure == "tuple" else element[0]

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.data.Dataset.{name} yet")

