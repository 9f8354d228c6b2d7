"""fit's deferred reads seen from Python: Keras' Callback.async_safe (keras/callbacks.py's
_async_safe), the order of the hooks a user observes, the same logs and weights as reading every
step, what the built-in callbacks report, and an exception from a late batch end."""
import os

import numpy as np
import pytest

import lockstep as tf
from conftest import mlp

# Where every callback is async-safe, fit reads the steps' numbers when the next execution's would
# pass this many pending ones (FitLoop::kMaxPendingSteps, src/training/fit_loop.hpp) and at each
# epoch's end.
MAX_PENDING_STEPS = 16
BATCH = 64
STEPS = 20  # per epoch: one read after 16 steps, one at the epoch's end


class Recorder(tf.keras.callbacks.Callback):
    """Every hook's call in order: ("begin", batch), ("end", batch) and the epochs' (epoch, name);
    each batch end's logs, copied."""

    def __init__(self, async_safe=None):
        if async_safe is not None:
            self.async_safe = async_safe
        self.calls, self.batch_logs = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch_begin", epoch))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch))

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(("begin", batch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("end", batch))
        self.batch_logs.append((batch, dict(logs)))


def expected_hooks(steps, per_execution, deferred):
    """One epoch's batch hooks: each execution's begin before its steps are queued; its end at once,
    or, deferred, at the read after which the next execution's steps would pass MAX_PENDING_STEPS,
    or at the epoch's end."""
    hooks, ends, pending = [], [], 0
    for first in range(0, steps, per_execution):
        last = min(first + per_execution, steps) - 1
        hooks.append(("begin", first))
        ends.append(("end", last))
        pending += last - first + 1
        if not deferred or pending + per_execution > MAX_PENDING_STEPS:
            hooks, ends, pending = hooks + ends, [], 0
    return hooks + ends


def epoch_hooks(calls, epoch):
    start = calls.index(("epoch_begin", epoch))
    return calls[start + 1:calls.index(("epoch_end", epoch), start)]


def deferred(calls):
    """Whether fit queued batch 1 before it called batch 0's end (steps_per_execution 1)."""
    return calls.index(("begin", 1)) < calls.index(("end", 0))


def fit(mnist_small, callbacks, epochs=1, steps_per_execution=1):
    (x, y), _ = mnist_small
    tf.keras.utils.set_random_seed(7)
    model = mlp(tf)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  steps_per_execution=steps_per_execution)
    n = STEPS * BATCH
    history = model.fit(x[:n], y[:n], batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model, history


@pytest.fixture(autouse=True)
def reads_may_wait(monkeypatch):
    # LOCKSTEP_SYNC_EACH_STEP=1 (a user's or gpu_check's) reads every step whatever the callbacks.
    monkeypatch.delenv("LOCKSTEP_SYNC_EACH_STEP", raising=False)


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_async_safe_batch_ends_get_each_batchs_logs_in_order_and_train_the_same_weights(mnist_small,
                                                                                      steps_per_execution):
    runs = {}
    for safe in (False, True):
        recorder = Recorder(async_safe=safe)
        model, history = fit(mnist_small, [recorder], epochs=2, steps_per_execution=steps_per_execution)
        runs[safe] = recorder, history, [v.numpy() for v in model.variables]
    (sync, sync_history, sync_weights), (late, late_history, late_weights) = runs[False], runs[True]
    ends = [b for b in range(STEPS) if b % steps_per_execution == steps_per_execution - 1 or b == STEPS - 1]
    assert [b for b, _ in late.batch_logs] == ends * 2
    assert late.batch_logs == sync.batch_logs  # each batch's own loss and accuracy, bit for bit
    assert set(late.batch_logs[0][1]) == {"loss", "accuracy"}
    for key in ("loss", "accuracy"):
        assert late_history.history[key] == sync_history.history[key]
    assert late_history.epoch == sync_history.epoch == [0, 1]
    for a, b in zip(late_weights, sync_weights):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("steps_per_execution", [1, 3, 4])
def test_hooks_show_the_deferral_only_where_every_callback_is_async_safe(mnist_small, steps_per_execution):
    for safe in (False, True):
        recorder = Recorder(async_safe=safe)
        fit(mnist_small, [recorder], epochs=2, steps_per_execution=steps_per_execution)
        for epoch in (0, 1):
            assert epoch_hooks(recorder.calls, epoch) == expected_hooks(STEPS, steps_per_execution, deferred=safe)
    if steps_per_execution == 1:  # spelled out: 16 begins, then their ends, then the last 4 of each
        assert epoch_hooks(recorder.calls, 0) == ([("begin", b) for b in range(16)] + [("end", b) for b in range(16)] +
                                                  [("begin", b) for b in range(16, 20)] +
                                                  [("end", b) for b in range(16, 20)])
    # One callback that is not async-safe makes fit read every execution for all of them.
    recorder = Recorder(async_safe=True)
    fit(mnist_small, [recorder, Recorder()], steps_per_execution=steps_per_execution)
    assert epoch_hooks(recorder.calls, 0) == expected_hooks(STEPS, steps_per_execution, deferred=False)


class EpochsOnly(tf.keras.callbacks.Callback):
    def __init__(self):
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(epoch)


class BatchBeginOnly(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        pass


@pytest.mark.parametrize("value, late", [(True, True), (1, True), ("yes", True), (np.bool_(True), True),
                                         (False, False), (0, False), (None, False), ("", False),
                                         (np.bool_(False), False)])
def test_async_safe_is_read_as_bool_as_keras_does(mnist_small, value, late):
    # Keras 3: getattr(callback, "async_safe", False), taken as true or false.
    recorder = Recorder(async_safe=value)
    fit(mnist_small, [recorder])
    assert deferred(recorder.calls) == late


def test_an_async_safe_that_is_neither_true_nor_false_is_refused_by_name(mnist_small):
    recorder = Recorder(async_safe=np.array([True, False]))
    with pytest.raises(ValueError, match=r"Recorder\.async_safe must be true or false.*ambiguous"):
        fit(mnist_small, [recorder])
    assert recorder.calls == []


def test_a_callback_without_batch_hooks_is_async_safe_as_in_keras(mnist_small):
    # Keras 3 dispatches batch ends late beside a callback that does not set async_safe but has no
    # batch end hook of its own; lockstep asks that it have no batch begin hook either.
    recorder, epochs_only = Recorder(async_safe=True), EpochsOnly()
    fit(mnist_small, [recorder, epochs_only], epochs=2)
    assert deferred(recorder.calls) and epochs_only.epochs == [0, 1]
    assert not epochs_only.async_safe  # (the attribute itself is still Keras' default)
    recorder = Recorder(async_safe=True)
    fit(mnist_small, [recorder, BatchBeginOnly()])
    assert not deferred(recorder.calls)
    hook = EpochsOnly()
    hook.on_train_batch_end = lambda batch, logs=None: None  # a hook set on the object counts too
    recorder = Recorder(async_safe=True)
    fit(mnist_small, [recorder, hook])
    assert not deferred(recorder.calls)


def test_built_in_callbacks_report_async_safe_as_their_cpp_callbacks_and_fit_agrees(mnist_small, tmp_path):
    cb = tf.keras.callbacks
    path = str(tmp_path)
    reports = [
        (cb.EarlyStopping(monitor="loss"), True),
        (cb.CSVLogger(os.path.join(path, "log.csv")), True),
        (cb.ModelCheckpoint(os.path.join(path, "ckpt-{epoch}"), save_weights_only=True), True),
        (cb.ModelCheckpoint(os.path.join(path, "ckpt-{epoch}-{batch}"), save_freq=5), False),
        (cb.TensorBoard(os.path.join(path, "logs")), True),
        (cb.TensorBoard(os.path.join(path, "logs_batches"), update_freq=5), False),
        (cb.BackupAndRestore(os.path.join(path, "backup")), True),
        (cb.BackupAndRestore(os.path.join(path, "backup_batches"), save_freq=5), False),
        (cb.LambdaCallback(on_epoch_end=lambda epoch, logs: None), True),
        (cb.LambdaCallback(on_train_batch_begin=lambda batch, logs: None), False),
        (cb.LambdaCallback(on_train_batch_end=lambda batch, logs: None), False),
    ]
    for callback, safe in reports:
        assert callback.async_safe is safe, callback
        recorder = Recorder(async_safe=True)
        fit(mnist_small, [recorder, callback])
        assert deferred(recorder.calls) == safe, callback
    assert tf.keras.callbacks.Callback().async_safe is False  # Keras' default
    with pytest.raises(AttributeError):
        cb.EarlyStopping().async_safe = False  # the C++ callback decides, not the Python object


def test_a_stop_set_by_a_late_batch_end_shows_no_callback_a_later_batch(mnist_small):
    class StopsAtBatch2(Recorder):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if batch == 2:
                self.model.stop_training = True

    stopper, other = StopsAtBatch2(async_safe=True), Recorder(async_safe=True)
    _, history = fit(mnist_small, [stopper, other], epochs=3)
    assert deferred(stopper.calls)
    # Steps up to the read ran (their weights are trained), but as without deferral every callback
    # sees batch 2's end last, then the epoch's end, and fit ends.
    for recorder in (stopper, other):
        assert [b for b, _ in recorder.batch_logs] == [0, 1, 2]
        assert recorder.calls[-1] == ("epoch_end", 0)
    assert history.epoch == [0]


def test_an_exception_from_a_late_batch_end_surfaces_and_keeps_what_was_saved(mnist_small, tmp_path):
    class Diverged(Exception):
        pass

    class FailsInSecondEpoch(Recorder):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            self.weights = [v.numpy() for v in self.model.variables]

        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if len(self.batch_logs) == STEPS + 3:
                raise Diverged(f"loss {logs['loss']:.3f} at batch {batch}")

    failing = FailsInSecondEpoch(async_safe=True)
    backup, csv = str(tmp_path / "backup"), str(tmp_path / "log.csv")
    callbacks = [failing, tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt-{epoch}"), save_weights_only=True),
                 tf.keras.callbacks.BackupAndRestore(backup), tf.keras.callbacks.CSVLogger(csv)]
    with pytest.raises(Diverged, match=r"^loss \d+\.\d{3} at batch 2$"):
        fit(mnist_small, callbacks, epochs=3)
    assert deferred(failing.calls)
    # Fit stopped at that batch end: no later one, no epoch end (so no save of the second epoch).
    assert failing.calls[-1] == ("end", 2) and failing.calls.count(("epoch_end", 1)) == 0
    # The first epoch's files are whole: the CSV row, the checkpoint, the backup.
    with open(csv) as f:
        assert [line.split(",")[0] for line in f.read().splitlines()] == ["epoch", "0"]
    fresh = mlp(tf)
    fresh.build((None, 28, 28))
    tf.train.Checkpoint(model=fresh).restore(str(tmp_path / "ckpt-1"))
    for a, b in zip([v.numpy() for v in fresh.variables], failing.weights):
        np.testing.assert_array_equal(a, b)

    class Resumed(Recorder):
        def on_train_begin(self, logs=None):  # after BackupAndRestore (before it in the list) restored
            self.weights = [v.numpy() for v in self.model.variables]

    resumed = Resumed(async_safe=True)
    _, history = fit(mnist_small, [tf.keras.callbacks.BackupAndRestore(backup), resumed], epochs=3)
    assert history.epoch == [1, 2] and resumed.calls[0] == ("epoch_begin", 1)
    for a, b in zip(resumed.weights, failing.weights):
        np.testing.assert_array_equal(a, b)
    assert not os.path.exists(backup) or not os.listdir(backup)  # a finished fit removes its backup
