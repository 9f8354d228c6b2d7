"""keras.callbacks on lockstep's C++ callbacks (they run while the GIL is released)."""
import inspect
import math

import numpy as np

from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr

__getattr__ = unsupported_getattr("tf.keras.callbacks")


def _freq(save_freq, what):
    """Keras' "epoch" or a number of batches."""
    if save_freq == "epoch":
        return 0
    if isinstance(save_freq, int) and save_freq > 0:
        return save_freq
    raise ValueError(f"{what}: save_freq must be 'epoch' or a positive number of batches, not {save_freq!r}")


class Callback:
    """keras.callbacks.Callback: subclass it and override the hooks; fit calls them (with the GIL)
    and sets self.model (self.model.stop_training = True ends fit after the batch)."""

    _callback = None  # lockstep's own callbacks: the C++ object
    model = None
    params = None  # fit's: {"epochs", "steps" (None where unknown), "verbose"}, as Keras sets them
    # Keras' async_safe: True lets fit call on_train_batch_end after later steps were queued
    # (each call still gets its own batch's logs, in order; a stop_training it sets ends fit at
    # that read, up to 15 steps on), so fit reads the steps' numbers once per several steps;
    # every callback of a fit must be (_async_safe() below).
    async_safe = False

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs=logs)  # as Keras: its older name, which a subclass may override

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)

    def on_batch_begin(self, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass


def _logs(logs):
    return {} if logs is None else logs


class _NativeCallback(Callback):
    """One of lockstep's C++ callbacks (self._callback). Its hooks run the C++ callback's, so that a
    Python subclass may override them as Keras' may: native() then makes the subclass a Python
    callback, whose hooks it does not override, and whose super().hook(...) calls, run these.
    Whether it is async-safe is the C++ callback's answer (EarlyStopping's is, a ModelCheckpoint
    saving every N batches is not), unless a subclass overrides a batch hook: then Keras' default,
    false, or the subclass's own class attribute async_safe."""

    @property
    def async_safe(self):
        if any(_has_own(self, hook, _NativeCallback) for hook in _BATCH_HOOKS):
            return False
        return self._callback.async_safe

    def on_train_begin(self, logs=None):
        self._callback.on_train_begin(_logs(logs))

    def on_train_end(self, logs=None):
        self._callback.on_train_end(_logs(logs))

    def on_epoch_begin(self, epoch, logs=None):
        self._callback.on_epoch_begin(epoch, _logs(logs))

    def on_epoch_end(self, epoch, logs=None):
        self._callback.on_epoch_end(epoch, _logs(logs))

    def on_train_batch_begin(self, batch, logs=None):
        self._callback.on_train_batch_begin(batch, _logs(logs))

    def on_train_batch_end(self, batch, logs=None):
        self._callback.on_train_batch_end(batch, _logs(logs))


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None, on_train_end=None,
                 on_train_batch_begin=None, on_train_batch_end=None, **kwargs):
        refuse_arguments("keras.callbacks.LambdaCallback", **kwargs)
        # As the C++ LambdaCallback: async-safe without batch hooks (one may read the model as of its batch).
        self.async_safe = on_train_batch_begin is None and on_train_batch_end is None
        given = {"on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end, "on_train_begin": on_train_begin,
                 "on_train_end": on_train_end, "on_train_batch_begin": on_train_batch_begin,
                 "on_train_batch_end": on_train_batch_end}
        for hook, fn in given.items():
            if fn is not None:
                setattr(self, hook, fn)


class ModelCheckpoint(_NativeCallback):
    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None):
        refuse_arguments("keras.callbacks.ModelCheckpoint", initial_value_threshold=initial_value_threshold)
        self._callback = _lockstep.model_checkpoint(str(filepath), monitor, verbose, save_best_only,
                                                    save_weights_only, mode, _freq(save_freq, "ModelCheckpoint"))


class TensorBoard(_NativeCallback):
    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False, write_steps_per_second=False,
                 update_freq="epoch", profile_batch=0, embeddings_freq=0, embeddings_metadata=None):
        refuse_arguments("keras.callbacks.TensorBoard", write_images=write_images,
                         write_steps_per_second=write_steps_per_second, profile_batch=profile_batch or None,
                         embeddings_freq=embeddings_freq or None, embeddings_metadata=embeddings_metadata)
        self._callback = _lockstep.tensorboard(str(log_dir), histogram_freq, _freq(update_freq, "TensorBoard"),
                                               write_graph)


class EarlyStopping(_NativeCallback):
    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0):
        self._callback = _lockstep.early_stopping(monitor, float(min_delta), patience, verbose, mode, baseline,
                                                  restore_best_weights, start_from_epoch)


class BackupAndRestore(_NativeCallback):
    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        self._callback = _lockstep.backup_and_restore(str(backup_dir), _freq(save_freq, "BackupAndRestore"),
                                                      delete_checkpoint)


class CSVLogger(_NativeCallback):
    def __init__(self, filename, separator=",", append=False):
        self._callback = _lockstep.csv_logger(str(filename), separator, append)


class ReduceLROnPlateau(_NativeCallback):
    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto", min_delta=1e-4, cooldown=0,
                 min_lr=0.0, **kwargs):
        refuse_arguments("keras.callbacks.ReduceLROnPlateau", **kwargs)
        self._callback = _lockstep.reduce_lr_on_plateau(monitor, float(factor), patience, verbose, mode,
                                                        float(min_delta), cooldown, float(min_lr))


class LearningRateScheduler(_NativeCallback):
    """Sets the optimizer's learning rate at each epoch's start to schedule(epoch, lr) (lr: the
    current rate, a float), or schedule(epoch) for a function of one argument, as Keras' older API."""

    def __init__(self, schedule, verbose=0):
        if not callable(schedule):
            raise ValueError(f"keras.callbacks.LearningRateScheduler: schedule must be a function, not {schedule!r}")
        self.schedule = schedule
        self.verbose = verbose
        self._callback = _lockstep.learning_rate_scheduler(_rate_of(schedule), int(verbose))


def _rate_of(schedule):
    """schedule as the C++ LearningRateScheduler calls it, (epoch, lr) -> lr, with Keras' check of
    what it returns. Keras tries schedule(epoch, lr) and, on a TypeError, schedule(epoch); the
    signature decides here, so that a TypeError raised inside the schedule reaches the caller as it was."""
    try:
        takes_lr = _binds(schedule, 0, 0.0)
    except ValueError:  # no signature to read (some built-in functions): Keras' current API
        takes_lr = True
    if not takes_lr and not _binds(schedule, 0):
        raise ValueError(f"keras.callbacks.LearningRateScheduler: schedule must take (epoch, lr) or (epoch), "
                         f"not {inspect.signature(schedule)}")

    def rate(epoch, lr):
        value = schedule(epoch, lr) if takes_lr else schedule(epoch)
        if not isinstance(value, (float, np.floating)):
            raise ValueError(f"The output of the `schedule` function should be a float. Got: {value!r}")
        return float(value)

    return rate


def _binds(fn, *args):
    try:
        inspect.signature(fn).bind(*args)
        return True
    except TypeError:
        return False


class TerminateOnNaN(_NativeCallback):
    """Stops fit after the first batch whose loss is NaN or infinite (that batch's epoch still ends:
    its logs, History row and epoch-end callbacks). Async-safe, as the C++ one: fit may have run up
    to 15 further steps by then, whose weights are past the divergence anyway. raise_error=True
    raises a RuntimeError at that batch's end instead, as Keras 3 does (no epoch end, no train end):
    a batch hook of its own, so fit reads every step."""

    def __init__(self, raise_error=False):
        self.raise_error = bool(raise_error)
        self._callback = _lockstep.terminate_on_nan()
        if self.raise_error:
            self.on_train_batch_end = self._raise_on_nan

    def _raise_on_nan(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            raise RuntimeError(f"NaN or Inf loss encountered at batch {batch}. Loss value: {loss}. "
                               f"Terminating training immediately.")


_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end")
# A built-in's hooks (its C++ callback's), which a subclass may override; not the older batch
# hooks' names: a built-in's batch hooks are its own and call neither, as Keras' do.
_HOOKS = ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end") + _BATCH_HOOKS
_OLDER_BATCH_HOOKS = ("on_batch_begin", "on_batch_end")


def _has_own(callback, hook, base=Callback):
    """Whether the callback's hook is its own (its class's or set on it), not base's (Callback's no-op,
    or a built-in's C++ hook)."""
    return getattr(type(callback), hook) is not getattr(base, hook) or hook in getattr(callback, "__dict__", {})


def _async_safe(callback):
    """Whether fit may call a Python callback's on_train_batch_end late, as Keras 3 decides: its
    async_safe attribute read as bool() (1 or "yes" are true, None false), else whether it has no
    batch hook of its own, under either name (Keras 3 asks only for the batch end; lockstep asks for
    the begin too, which fit calls before an earlier batch's end, as its C++ LambdaCallback does)."""
    flag = getattr(callback, "async_safe", False)
    try:
        if bool(flag):
            return True
    except Exception as e:  # (e.g. a NumPy array of several values)
        raise ValueError(f"keras.Model.fit: {type(callback).__name__}.async_safe must be true or false, "
                         f"and bool() of {flag!r} fails: {e}") from e
    return not any(_has_own(callback, hook) for hook in _BATCH_HOOKS + _OLDER_BATCH_HOOKS)


def native(callback, model):
    """The C++ callback fit calls for a keras.callbacks object: a built-in's own, unless a Python
    subclass overrides one of its hooks; otherwise one that calls the object's hooks (with the
    built-in as its base: see _NativeCallback)."""
    if not isinstance(callback, Callback):
        raise ValueError(f"keras.Model.fit: {callback!r} is not a keras.callbacks.Callback")
    base = callback._callback
    if base is None and isinstance(callback, _NativeCallback):
        raise ValueError(f"keras.Model.fit: {type(callback).__name__}.__init__ must call super().__init__(...): "
                         f"the {_built_in(callback)} it subclasses is made there")
    if base is not None:
        overridden = [f"{type(callback).__name__}.{hook}" for hook in _HOOKS
                      if _has_own(callback, hook, _NativeCallback)]
        if not overridden:
            return base
        if isinstance(callback, BackupAndRestore):  # fit resumes from, and backs up through, the C++ one
            raise ValueError(f"keras.Model.fit: lockstep does not support overriding BackupAndRestore's hooks yet "
                             f"({', '.join(overridden)})")
    callback.set_model(model)
    return _lockstep.python_callback(callback, _async_safe(callback), base)


def _built_in(callback):
    """The name of the built-in a subclass derives from (its first base of this module's)."""
    return next(c.__name__ for c in type(callback).__mro__ if c.__module__ == __name__)
