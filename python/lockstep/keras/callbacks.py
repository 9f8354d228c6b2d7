"""keras.callbacks on lockstep's C++ callbacks (they run while the GIL is released)."""
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
    # Keras' async_safe: True lets fit call on_train_batch_end after later steps were queued
    # (each call still gets its own batch's logs, in order; a stop_training it sets ends fit at
    # that read, up to 15 steps on), so fit reads the steps' numbers once per several steps;
    # every callback of a fit must be (_async_safe() below).
    async_safe = False

    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass


class _NativeCallback(Callback):
    """One of lockstep's C++ callbacks (self._callback), which decides whether it is async-safe:
    fit asks it, and so does this attribute (EarlyStopping's is, a ModelCheckpoint saving every N
    batches is not)."""

    @property
    def async_safe(self):
        return self._callback.async_safe


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


_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end")


def _has_own(callback, hook):
    """Whether the callback's hook is its own (its class's or set on it), not Callback's no-op."""
    return getattr(type(callback), hook) is not getattr(Callback, hook) or hook in getattr(callback, "__dict__", {})


def _async_safe(callback):
    """Whether fit may call a Python callback's on_train_batch_end late, as Keras 3 decides: its
    async_safe attribute read as bool() (1 or "yes" are true, None false), else whether it has no
    batch hook of its own (Keras 3 asks only on_train_batch_end; lockstep asks on_train_batch_begin
    too, which fit calls before an earlier batch's end, as its C++ LambdaCallback does)."""
    flag = getattr(callback, "async_safe", False)
    try:
        if bool(flag):
            return True
    except Exception as e:  # (e.g. a NumPy array of several values)
        raise ValueError(f"keras.Model.fit: {type(callback).__name__}.async_safe must be true or false, "
                         f"and bool() of {flag!r} fails: {e}") from e
    return not any(_has_own(callback, hook) for hook in _BATCH_HOOKS)


def native(callback, model):
    """The C++ callback behind a keras.callbacks object (a Python subclass: one that calls its hooks)."""
    if not isinstance(callback, Callback):
        raise ValueError(f"keras.Model.fit: {callback!r} is not a keras.callbacks.Callback")
    if callback._callback is not None:
        return callback._callback
    callback.set_model(model)
    return _lockstep.python_callback(callback, _async_safe(callback))
