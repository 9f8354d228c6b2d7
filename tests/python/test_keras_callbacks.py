"""keras.callbacks' ReduceLROnPlateau, LearningRateScheduler and TerminateOnNaN as a Python user relies
on them (the rate the next epoch's steps train with, the stop at the first non-finite loss), a Python
subclass of a built-in (its overrides called, super() and the hooks it does not override running the
built-in's), and the optimizer's learning_rate read and written from a callback."""
import math
import os

import numpy as np
import pytest

import lockstep as tf

BATCH = 32
STEPS = 8  # per epoch


def data(val_zero=False):
    """A linear regression; with val_zero, validation inputs of zeros, which a kernel without a bias
    maps to 0 whatever its weights: a val_loss that stays 1.0 (a plateau) while the model trains."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32) + 0.1).astype(np.float32)
    val = (np.zeros((64, 4), np.float32), np.ones((64, 1), np.float32)) if val_zero else None
    return x, y, val


def model(learning_rate=0.05, use_bias=False):
    tf.keras.utils.set_random_seed(7)
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, use_bias=use_bias)])
    m.compile(optimizer=tf.keras.optimizers.SGD(learning_rate), loss="mse")
    return m


def fit(m, callbacks, epochs, val_zero=False, x=None, **kwargs):
    x_train, y, val = data(val_zero)
    return m.fit(x_train if x is None else x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                 validation_data=val, callbacks=callbacks, **kwargs)


def weights(m):
    return [v.numpy() for v in m.variables]


def trained_with_rates(rates, val_zero=False):
    """The weights of a model trained one epoch per rate, each set before its epoch's fit through
    model.optimizer.learning_rate: what a callback changing the rate between epochs must give."""
    m = model()
    for epoch, rate in enumerate(rates):
        m.optimizer.learning_rate = rate
        fit(m, [], epochs=epoch + 1, initial_epoch=epoch, val_zero=val_zero)
    return weights(m)


def assert_same_weights(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


class Rates(tf.keras.callbacks.Callback):
    """The learning rate each epoch starts with, read as Keras users read it."""

    def __init__(self):
        self.rates = []

    def on_epoch_begin(self, epoch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate))


class BatchEnds(tf.keras.callbacks.Callback):
    """(epoch, batch, loss) of every batch end; async-safe, so that fit may defer its reads."""

    async_safe = True

    def __init__(self):
        self.ends, self.epoch = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append((self.epoch, batch, logs["loss"]))


def test_the_three_are_keras_callbacks_now():
    for name in ("ReduceLROnPlateau", "LearningRateScheduler", "TerminateOnNaN"):
        assert issubclass(getattr(tf.keras.callbacks, name), tf.keras.callbacks.Callback)


# LearningRateScheduler


def test_learning_rate_scheduler_sets_the_rate_each_epochs_steps_train_with():
    rates, seen = [0.05, 0.02, 0.1], []

    def schedule(epoch, lr):
        seen.append((epoch, lr))
        return rates[epoch]

    m, recorder = model(learning_rate=0.3), Rates()
    fit(m, [tf.keras.callbacks.LearningRateScheduler(schedule), recorder], epochs=3)
    assert [e for e, _ in seen] == [0, 1, 2]
    assert [lr for _, lr in seen] == [pytest.approx(0.3), 0.05, 0.02]  # the current rate, a float
    assert all(type(lr) is float for _, lr in seen)
    assert recorder.rates == rates and m.optimizer.learning_rate == 0.1
    assert_same_weights(weights(m), trained_with_rates(rates))
    constant = model()
    fit(constant, [], epochs=3)
    assert not np.array_equal(weights(constant)[0], weights(m)[0])  # the rates made a difference


def test_learning_rate_scheduler_takes_keras_older_one_argument_schedule():
    m, recorder = model(), Rates()
    fit(m, [tf.keras.callbacks.LearningRateScheduler(lambda epoch: 0.01 * (epoch + 1)), recorder], epochs=2)
    assert recorder.rates == [0.01, 0.02]


def test_a_schedules_exception_surfaces_with_its_type():
    class Diverged(Exception):
        pass

    def schedule(epoch, lr):
        if epoch == 1:
            raise Diverged("no rate for epoch 1")
        return lr

    ends = BatchEnds()
    with pytest.raises(Diverged, match="^no rate for epoch 1$"):
        fit(model(), [tf.keras.callbacks.LearningRateScheduler(schedule), ends], epochs=3)
    assert {e for e, _, _ in ends.ends} == {0}  # no step of epoch 1 ran

    def typo(epoch, lr):  # a TypeError inside is the schedule's own, not a sign of the older API
        return lr * "2"

    with pytest.raises(TypeError, match="can't multiply sequence"):
        fit(model(), [tf.keras.callbacks.LearningRateScheduler(typo)], epochs=1)


def test_a_schedule_must_give_a_float_as_in_keras():
    for bad in (lambda epoch, lr: 1, lambda epoch, lr: None, lambda epoch, lr: "0.1"):
        with pytest.raises(ValueError, match="The output of the `schedule` function should be a float"):
            fit(model(), [tf.keras.callbacks.LearningRateScheduler(bad)], epochs=1)
    m, recorder = model(), Rates()
    fit(m, [tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: np.float32(0.25)), recorder], epochs=1)
    assert recorder.rates == [0.25]
    with pytest.raises(ValueError, match="learning_rate"):  # the C++ optimizer's own check
        fit(model(), [tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: -1.0)], epochs=1)
    with pytest.raises(ValueError, match=r"schedule must take \(epoch, lr\) or \(epoch\), not \(\)"):
        tf.keras.callbacks.LearningRateScheduler(lambda: 0.1)
    with pytest.raises(ValueError, match="schedule must be a function, not 0.1"):
        tf.keras.callbacks.LearningRateScheduler(0.1)


# ReduceLROnPlateau


def test_reduce_lr_on_plateau_reduces_by_factor_after_patience_down_to_min_lr():
    # val_loss stays 1.0 from the first epoch: every patience-th epoch after it, the rate is halved,
    # and min_lr bounds it (0.0125 -> 0.02); the model trains on the rate of each epoch.
    m, recorder = model(learning_rate=0.1), Rates()
    reduce = tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, min_lr=0.02)
    history = fit(m, [reduce, recorder], epochs=10, val_zero=True)
    assert history.history["val_loss"] == [1.0] * 10
    expected = [0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.02, 0.02, 0.02]
    assert recorder.rates == expected and m.optimizer.learning_rate == 0.02
    assert_same_weights(weights(m), trained_with_rates(expected, val_zero=True))


def test_reduce_lr_on_plateau_keeps_the_rate_while_the_metric_improves_and_waits_out_its_cooldown():
    m, recorder = model(learning_rate=0.05), Rates()
    fit(m, [tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=1), recorder], epochs=4)
    assert recorder.rates == [0.05] * 4  # the training loss falls every epoch
    m, recorder = model(learning_rate=0.1), Rates()
    reduce = tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, cooldown=2)
    fit(m, [reduce, recorder], epochs=8, val_zero=True)
    # Reduced after epochs 1, 3 and 5: the epoch after a reduction waits out the cooldown (Keras counts
    # it down at each epoch end, and a count that reaches 0 lets that epoch count toward patience).
    assert recorder.rates == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125]


def test_reduce_lr_on_plateau_refuses_bad_arguments_by_name():
    with pytest.raises(ValueError, match=r"argument epsilon=0\.1 of keras\.callbacks\.ReduceLROnPlateau yet"):
        tf.keras.callbacks.ReduceLROnPlateau(epsilon=0.1)
    with pytest.raises(ValueError, match="factor >= 1.0"):
        tf.keras.callbacks.ReduceLROnPlateau(factor=1.5)
    with pytest.raises(ValueError, match="mode"):
        tf.keras.callbacks.ReduceLROnPlateau(mode="sideways")


# TerminateOnNaN


def test_terminate_on_nan_stops_at_the_first_nan_batch_and_keeps_what_was_saved(tmp_path):
    class NanAfterFirstEpoch(tf.keras.callbacks.Callback):  # the weights diverge between epochs 0 and 1
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                kernel = self.model.variables[0]
                kernel.assign(np.full(kernel.numpy().shape, np.nan, np.float32))

    ends, diverge = BatchEnds(), NanAfterFirstEpoch()
    checkpoint = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt-{epoch}"), save_weights_only=True)
    terminate = tf.keras.callbacks.TerminateOnNaN()
    assert terminate.async_safe
    m = model()
    history = fit(m, [terminate, ends, checkpoint, diverge], epochs=4)
    # Epoch 1's first batch gave NaN: no callback saw a later batch, and its epoch was the last.
    assert ends.ends[-1][:2] == (1, 0) and math.isnan(ends.ends[-1][2])
    assert all(math.isfinite(loss) for _, _, loss in ends.ends[:-1]) and len(ends.ends) == STEPS + 1
    assert history.epoch == [0, 1] and math.isnan(history.history["loss"][1])
    # The checkpoint saved before the divergence holds the weights of epoch 0's end.
    fresh = model()
    tf.train.Checkpoint(model=fresh).restore(str(tmp_path / "ckpt-1"))
    first = weights(fresh)
    assert all(np.isfinite(w).all() for w in first)
    np.testing.assert_array_equal(first[0], fit_one_epoch_kernel())


def fit_one_epoch_kernel():
    m = model()
    fit(m, [], epochs=1)
    return weights(m)[0]


def test_terminate_on_nan_with_raise_error_raises_at_the_first_nan_batch():
    class NanInEpoch1(BatchEnds):
        def on_epoch_begin(self, epoch, logs=None):
            super().on_epoch_begin(epoch, logs)
            if epoch == 1:
                kernel = self.model.variables[0]
                kernel.assign(np.full(kernel.numpy().shape, np.inf, np.float32))

        def on_epoch_end(self, epoch, logs=None):
            self.epoch_ends = getattr(self, "epoch_ends", 0) + 1

    terminate, ends = tf.keras.callbacks.TerminateOnNaN(raise_error=True), NanInEpoch1()
    assert not terminate.async_safe  # a batch hook of its own, as Keras 3's
    with pytest.raises(RuntimeError, match=r"^NaN or Inf loss encountered at batch 0\. Loss value: (nan|inf)\."):
        fit(model(), [ends, terminate], epochs=3)
    assert ends.ends[-1][:2] == (1, 0) and ends.epoch_ends == 1  # no end of epoch 1


# The optimizer's learning_rate from a callback


def test_a_callback_reads_and_writes_the_learning_rate_the_next_epoch_trains_with():
    class Halve(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.optimizer.learning_rate = self.model.optimizer.learning_rate / 2

    sgd = tf.keras.optimizers.SGD(0.08)
    tf.keras.utils.set_random_seed(7)
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, use_bias=False)])
    m.compile(optimizer=sgd, loss="mse")
    assert m.optimizer is sgd  # Keras: the object compile was given
    fit(m, [Halve()], epochs=3)
    assert sgd.learning_rate == 0.01
    assert_same_weights(weights(m), trained_with_rates([0.08, 0.04, 0.02]))
    for bad in ("0.1", None, True):
        with pytest.raises(ValueError, match="learning_rate"):
            sgd.learning_rate = bad
    with pytest.raises(ValueError, match="learning_rate"):
        sgd.learning_rate = float("nan")
    m = model()
    m.compile(optimizer="sgd", loss="mse")  # by name: model.optimizer is one of the C++ optimizer
    assert m.optimizer.learning_rate == pytest.approx(0.01) and m.optimizer is m.optimizer


# Python subclasses of the built-ins


def test_a_model_checkpoint_subclass_calling_super_still_saves(tmp_path):
    class Noted(tf.keras.callbacks.ModelCheckpoint):
        def __init__(self, path, call_super):
            super().__init__(path, save_weights_only=True)
            self.call_super, self.epochs = call_super, []

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append((epoch, logs["loss"]))
            if self.call_super:
                super().on_epoch_end(epoch, logs)

    with_super, without = Noted(str(tmp_path / "a-{epoch}"), True), Noted(str(tmp_path / "b-{epoch}"), False)
    fit(model(), [with_super, without], epochs=2)
    assert [e for e, _ in with_super.epochs] == [0, 1] and with_super.epochs == without.epochs
    files = sorted(os.listdir(tmp_path))
    assert [f for f in files if f.startswith("a-")] == ["a-1.json", "a-1.safetensors", "a-2.json", "a-2.safetensors"]
    assert not any(f.startswith("b-") for f in files)  # its override replaced the save


def test_a_subclass_keeps_the_built_ins_hooks_it_does_not_override():
    class Stopping(tf.keras.callbacks.EarlyStopping):  # overrides on_train_end only
        def on_train_end(self, logs=None):
            self.ended = True

    stopping = Stopping(monitor="val_loss", patience=1)
    history = fit(model(), [stopping], epochs=6, val_zero=True)
    # EarlyStopping's on_train_begin and on_epoch_end still ran: val_loss never improved after epoch 0.
    assert history.epoch == [0, 1] and stopping.ended
    assert stopping.async_safe  # epoch hooks only, as EarlyStopping's


def test_a_subclass_overriding_a_batch_hook_runs_it_and_the_base_every_n_batches(tmp_path):
    class Batches(tf.keras.callbacks.ModelCheckpoint):
        def __init__(self, path):
            super().__init__(path, save_weights_only=True, save_freq=3)
            self.batches = []

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append(batch)
            super().on_train_batch_end(batch, logs)

    batches = Batches(str(tmp_path / "ckpt-{epoch}-{batch}"))
    assert not batches.async_safe  # its own batch hook: Keras' default
    fit(model(), [batches], epochs=1)
    assert batches.batches == list(range(STEPS))
    saved = sorted(f[:-len(".json")] for f in os.listdir(tmp_path) if f.endswith(".json"))
    assert saved == ["ckpt-1-3", "ckpt-1-6"]

    class Declared(Batches):
        async_safe = True

    assert Declared(str(tmp_path / "d")).async_safe
    per_epoch = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "e"))

    class EpochOverride(tf.keras.callbacks.ModelCheckpoint):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)

    assert per_epoch.async_safe and EpochOverride(str(tmp_path / "f")).async_safe
    assert not EpochOverride(str(tmp_path / "g"), save_freq=2).async_safe  # the C++ callback's answer


def test_subclass_hooks_see_the_python_model_and_a_hook_set_on_the_object_counts():
    seen = []
    stopping = tf.keras.callbacks.EarlyStopping(monitor="loss")
    stopping.on_epoch_end = lambda epoch, logs=None: seen.append((epoch, stopping.model.optimizer.learning_rate))
    m = model()
    history = fit(m, [stopping], epochs=2)
    assert seen == [(0, 0.05), (1, 0.05)] and stopping.model is m
    assert history.epoch == [0, 1]


def test_a_subclass_that_does_not_call_the_built_ins_init_is_refused_by_name():
    class Forgot(tf.keras.callbacks.EarlyStopping):
        def __init__(self):
            self.epochs = []

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append(epoch)

    with pytest.raises(ValueError, match=r"Forgot\.__init__ must call super\(\)\.__init__\(\.\.\.\): the EarlyStop"):
        fit(model(), [Forgot()], epochs=1)


def test_a_backup_and_restore_subclass_overriding_a_hook_is_refused_by_name(tmp_path):
    class Noisy(tf.keras.callbacks.BackupAndRestore):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)

    with pytest.raises(ValueError, match=r"overriding BackupAndRestore's hooks yet \(Noisy\.on_epoch_end\)"):
        fit(model(), [Noisy(str(tmp_path / "backup"))], epochs=1)

    class Quiet(tf.keras.callbacks.BackupAndRestore):  # no hook of its own: the C++ callback as it is
        pass

    history = fit(model(), [Quiet(str(tmp_path / "backup"))], epochs=2)
    assert history.epoch == [0, 1]


# What Keras' Callback gives a subclass besides the hooks


def test_the_older_batch_hook_names_are_called_and_keep_fit_reading_each_step():
    class Older(tf.keras.callbacks.Callback):  # Keras 2's names, which Keras 3 still calls
        def __init__(self):
            self.calls = []

        def on_batch_begin(self, batch, logs=None):
            self.calls.append(("begin", batch))

        def on_batch_end(self, batch, logs=None):
            self.calls.append(("end", batch, logs["loss"]))

    older, ends = Older(), BatchEnds()
    fit(model(), [older, ends], epochs=2)
    assert [c[:2] for c in older.calls] == [(k, b) for _ in range(2) for b in range(STEPS) for k in ("begin", "end")]
    assert [c[2] for c in older.calls if c[0] == "end"] == [loss for _, _, loss in ends.ends]


def test_a_callback_gets_fits_params():
    class Params(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seen = dict(self.params)

    params = Params()
    fit(model(), [params], epochs=3)
    assert params.seen == {"epochs": 3, "steps": STEPS, "verbose": 0}
