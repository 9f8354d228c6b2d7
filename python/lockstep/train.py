"""tf.train: Checkpoint, CheckpointManager and latest_checkpoint on lockstep's checkpoints.

A checkpoint is a pair <dir>/<name>-<n>.safetensors / .json (the variables, the optimizer's slots and
step count, each verified on restore before anything is assigned), and <dir>/checkpoint names the
latest, as TensorFlow's files do. Restore needs the models built (lockstep does not defer it)."""
import os

from . import _lockstep
from ._support import refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.train")


class _RestoreStatus:
    """What restore() returns: lockstep's restore is all-or-nothing, so every assertion holds."""

    def assert_consumed(self):
        return self

    def assert_existing_objects_matched(self):
        return self

    def assert_nontrivial_match(self):
        return self

    def expect_partial(self):
        return self


class Checkpoint:
    """tf.train.Checkpoint(model=..., optimizer=...): keras models and optimizers by any keyword.
    A compiled model's optimizer is saved with it unless an optimizer is given."""

    def __init__(self, root=None, **kwargs):
        from .keras.models import Model
        from .keras.optimizers import Optimizer
        objects = dict(kwargs, **({} if root is None else {"root": root}))
        self._models, self._optimizers = [], []
        for name, value in objects.items():
            if isinstance(value, Model):
                self._models.append(value)
            elif isinstance(value, Optimizer):
                self._optimizers.append(value)
            else:
                raise ValueError(f"lockstep's tf.train.Checkpoint takes keras models and optimizers, not {name}="
                                 f"{type(value).__name__}")
        if len(self._optimizers) > 1:
            raise ValueError("lockstep's tf.train.Checkpoint takes one optimizer")
        self.save_counter = 0

    def _native(self, what):
        variables = []
        for model in self._models:
            if not model._model.built:
                raise ValueError(f"tf.train.Checkpoint.{what}: model '{model.name}' is not built yet (lockstep "
                                 f"needs its variables: build it, call it on a batch, or give input_shape)")
            variables += model.variables
        optimizer = self._optimizers[0]._optimizer if self._optimizers else None
        if optimizer is None:
            optimizer = next((m._model.optimizer for m in self._models if m._model.optimizer is not None), None)
        return variables, optimizer

    def _save_arguments(self):
        """The variables, the optimizer and whether this worker writes (the chief only, as Keras)."""
        variables, optimizer = self._native("save")
        return variables, optimizer, all(m._strategy is None or m._strategy._strategy.is_chief for m in self._models)

    def save(self, file_prefix, options=None):
        """Writes <file_prefix>-<n> (n counts on from the directory's latest) and returns that path."""
        refuse_arguments("tf.train.Checkpoint.save", options=options)
        directory, name = os.path.split(os.fspath(file_prefix))
        if not name:
            raise ValueError(f"tf.train.Checkpoint.save: {file_prefix!r} names a directory, not a file prefix")
        path = _lockstep.CheckpointManager(directory or ".", 0, name).save(*self._save_arguments())
        self.save_counter += 1
        return path

    def restore(self, save_path, options=None):
        """Loads save_path (None: nothing, as TensorFlow); OSError naming a missing or damaged file,
        ValueError where it does not match the models."""
        refuse_arguments("tf.train.Checkpoint.restore", options=options)
        if save_path is not None:
            _lockstep.load_checkpoint(os.fspath(save_path), *self._native("restore"))
        return _RestoreStatus()

    read = restore

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.train.Checkpoint.{name} yet")


class CheckpointManager:
    """tf.train.CheckpointManager: numbered saves in `directory`, the oldest deleted beyond max_to_keep
    (None keeps all)."""

    def __init__(self, checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt", step_counter=None, checkpoint_interval=None, init_fn=None):
        refuse_arguments("tf.train.CheckpointManager", keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
                         step_counter=step_counter, checkpoint_interval=checkpoint_interval, init_fn=init_fn)
        if not isinstance(checkpoint, Checkpoint):
            raise ValueError(f"tf.train.CheckpointManager: checkpoint must be a tf.train.Checkpoint, not "
                             f"{type(checkpoint).__name__}")
        if max_to_keep is not None and int(max_to_keep) < 1:
            raise ValueError(f"tf.train.CheckpointManager: max_to_keep must be at least 1 or None, not {max_to_keep}")
        self._checkpoint = checkpoint
        self._manager = _lockstep.CheckpointManager(os.fspath(directory), int(max_to_keep or 0), checkpoint_name)

    @property
    def directory(self):
        return self._manager.directory

    @property
    def latest_checkpoint(self):
        return self._manager.latest

    @property
    def checkpoints(self):
        return list(self._manager.checkpoints)

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        refuse_arguments("tf.train.CheckpointManager.save", checkpoint_number=checkpoint_number, options=options)
        path = self._manager.save(*self._checkpoint._save_arguments())
        self._checkpoint.save_counter += 1
        return path

    def restore_or_initialize(self):
        """Restores the latest checkpoint and returns its path, or None when there is none."""
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
        return latest


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The path of the newest checkpoint saved in checkpoint_dir, or None (OSError where its
    `checkpoint` file is damaged)."""
    refuse_arguments("tf.train.latest_checkpoint", latest_filename=latest_filename)
    return _lockstep.CheckpointManager(os.fspath(checkpoint_dir), 0, "ckpt").latest
