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
    # (each call still gets its own batch's logs, in order), so fit reads the steps' numbers
    # once per several steps; every callback of a fit must be.
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


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None, on_train_end=None,
                 on_train_batch_begin=None, on_train_batch_end=None, **kwargs):
        refuse_arguments("keras.callbacks.LambdaCallback", **kwargs)
        given = {"on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end, "on_train_begin": on_train_begin,
                 "on_train_end": on_train_end, "on_train_batch_begin": on_train_batch_begin,
                 "on_train_batch_end": on_train_batch_end}
        for hook, fn in given.items():
            if fn is not None:
                setattr(self, hook, fn)


class ModelCheckpoint(Callback):
    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None):
        refuse_arguments("keras.callbacks.ModelCheckpoint", initial_value_threshold=initial_value_threshold)
        self._callback = _lockstep.model_checkpoint(str(filepath), monitor, verbose, save_best_only,
                                                    save_weights_only, mode, _freq(save_freq, "ModelCheckpoint"))


class TensorBoard(Callback):
    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False, write_steps_per_second=False,
                 update_freq="epoch", profile_batch=0, embeddings_freq=0, embeddings_metadata=None):
        refuse_arguments("keras.callbacks.TensorBoard", write_images=write_images,
                         write_steps_per_second=write_steps_per_second, profile_batch=profile_batch or None,
                         embeddings_freq=embeddings_freq or None, embeddings_metadata=embeddings_metadata)
        self._callback = _lockstep.tensorboard(str(log_dir), histogram_freq, _freq(update_freq, "TensorBoard"),
                                               write_graph)


class EarlyStopping(Callback):
    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0):
        self._callback = _lockstep.early_stopping(monitor, float(min_delta), patience, verbose, mode, baseline,
                                                  restore_best_weights, start_from_epoch)


class BackupAndRestore(Callback):
    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        self._callback = _lockstep.backup_and_restore(str(backup_dir), _freq(save_freq, "BackupAndRestore"),
                                                      delete_checkpoint)


class CSVLogger(Callback):
    def __init__(self, filename, separator=",", append=False):
        self._callback = _lockstep.csv_logger(str(filename), separator, append)


def native(callback, model):
    """The C++ callback behind a keras.callbacks object (a Python subclass: one that calls its hooks)."""
    if not isinstance(callback, Callback):
        raise ValueError(f"keras.Model.fit: {callback!r} is not a keras.callbacks.Callback")
    if callback._callback is not None:
        return callback._callback
    callback.set_model(model)
    return _lockstep.python_callback(callback)
