"""The learning rate as a Keras 3 user sets and reads it: keras.optimizers.schedules' schedules (their
rates by Keras' formulas, fit training with them, a saved model keeping them), model.optimizer.learning_rate
(float, numpy, assign, arithmetic) and the "learning_rate" that ReduceLROnPlateau and LearningRateScheduler
put in the epoch logs."""
import math

import numpy as np
import pytest

import lockstep as tf

keras = tf.keras
schedules = keras.optimizers.schedules
BATCH = 32
STEPS = 8  # per epoch


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32) + 0.1).astype(np.float32)
    return x, y


def model(optimizer):
    keras.utils.set_random_seed(7)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])
    m.compile(optimizer=optimizer, loss="mse")
    return m


def fit(m, epochs, callbacks=(), x=None, y=None, **kwargs):
    xd, yd = data()
    return m.fit(xd if x is None else x, yd if y is None else y, batch_size=BATCH, epochs=epochs, shuffle=False,
                 verbose=0, callbacks=list(callbacks), **kwargs)


def kernel(m):
    return m.variables[0].numpy()


# The schedules' rates: Keras' formulas (keras/optimizers/schedules/learning_rate_schedule.py)


def rate(schedule, step):
    value = schedule(step)
    assert value.numpy().dtype == np.float32  # a float32 scalar, as Keras' schedules give
    return float(value)


def test_exponential_decay_is_keras_formula_with_and_without_staircase():
    smooth = schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    stairs = schedules.ExponentialDecay(0.1, 10, 0.5, staircase=True)
    for step in (0, 1, 5, 10, 15, 37):
        assert rate(smooth, step) == pytest.approx(0.1 * 0.5 ** (step / 10), rel=1e-6)
        assert rate(stairs, step) == pytest.approx(0.1 * 0.5 ** (step // 10), rel=1e-6)


def test_piecewise_constant_decay_takes_each_value_up_to_and_at_its_boundary():
    s = schedules.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    assert [rate(s, step) for step in (0, 10, 11, 20, 21, 1000)] == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.1, 0.1])


def test_cosine_decay_is_keras_formula_with_alpha_and_warmup():
    s = schedules.CosineDecay(0.2, decay_steps=100, alpha=0.1)
    for step in (0, 25, 50, 100, 150):
        decayed = 0.5 * (1 + math.cos(math.pi * min(step, 100) / 100))
        assert rate(s, step) == pytest.approx(0.2 * ((1 - 0.1) * decayed + 0.1), rel=1e-6, abs=1e-9)
    warm = schedules.CosineDecay(0.0, decay_steps=100, warmup_target=0.4, warmup_steps=10)
    assert rate(warm, 5) == pytest.approx(0.2, rel=1e-6)  # halfway up the linear warmup
    assert rate(warm, 10) == pytest.approx(0.4, rel=1e-6)
    assert rate(warm, 60) == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 50 / 100)), rel=1e-6)


def test_polynomial_decay_is_keras_formula_with_and_without_cycle():
    s = schedules.PolynomialDecay(0.1, decay_steps=10, end_learning_rate=0.01, power=2.0)
    cyc = schedules.PolynomialDecay(0.1, 10, 0.01, power=2.0, cycle=True)
    for step in (0, 3, 10, 25):
        assert rate(s, step) == pytest.approx((0.1 - 0.01) * (1 - min(step, 10) / 10) ** 2 + 0.01, rel=1e-6)
        steps = 10 * max(1, math.ceil(step / 10))
        assert rate(cyc, step) == pytest.approx((0.1 - 0.01) * (1 - step / steps) ** 2 + 0.01, rel=1e-6)
    assert schedules.PolynomialDecay(1.0, 4).get_config()["end_learning_rate"] == 0.0001  # Keras' default


def test_a_schedules_config_is_keras_and_round_trips():
    s = schedules.CosineDecay(0.1, 1000, warmup_target=0.2, warmup_steps=50)
    assert s.get_config() == {"initial_learning_rate": 0.1, "decay_steps": 1000, "alpha": 0.0, "name": "CosineDecay",
                              "warmup_target": 0.2, "warmup_steps": 50}
    again = schedules.deserialize(schedules.serialize(s))
    assert type(again) is schedules.CosineDecay and again.get_config() == s.get_config()
    assert [rate(again, k) for k in (0, 30, 700)] == [rate(s, k) for k in (0, 30, 700)]
    assert schedules.ExponentialDecay.from_config(
        {"initial_learning_rate": 1.0, "decay_steps": 2, "decay_rate": 0.5, "staircase": False,
         "name": "ExponentialDecay"})(4).numpy() == np.float32(0.25)


def test_bad_schedule_arguments_get_keras_errors_by_name():
    for cls in (schedules.ExponentialDecay, schedules.CosineDecay, schedules.PolynomialDecay):
        args = (0.1, 0, 0.5) if cls is schedules.ExponentialDecay else (0.1, 0)
        with pytest.raises(ValueError, match=r"Argument `decay_steps` must be > 0. Received: decay_steps=0"):
            cls(*args)
    with pytest.raises(ValueError, match="The length of boundaries should be 1 less than the length of values"):
        schedules.PiecewiseConstantDecay([10, 20], [1.0, 0.5])
    with pytest.raises(ValueError, match="boundaries must increase"):
        schedules.PiecewiseConstantDecay([20, 10], [1.0, 0.5, 0.1])
    with pytest.raises(ValueError, match="initial_learning_rate"):
        schedules.ExponentialDecay(-0.1, 10, 0.5)
    with pytest.raises(ValueError, match="initial_learning_rate=\"0.1\" must be a finite number"):
        schedules.ExponentialDecay("0.1", 10, 0.5)
    with pytest.raises(ValueError, match="alpha"):
        schedules.CosineDecay(0.1, 10, alpha=2.0)
    with pytest.raises(ValueError, match="power"):
        schedules.PolynomialDecay(0.1, 10, power=0.0)
    s = schedules.ExponentialDecay(0.1, 10, 0.5)
    with pytest.raises(ValueError, match="step must be an integer"):
        s(1.5)
    with pytest.raises(ValueError, match="step must be >= 0"):
        s(-1)
    with pytest.raises(TypeError, match="takes a step"):
        s("3")
    with pytest.raises(AttributeError, match="InverseTimeDecay"):
        schedules.InverseTimeDecay(0.1, 10, 0.5)
    with pytest.raises(ValueError, match="InverseTimeDecay"):
        schedules.deserialize({"class_name": "InverseTimeDecay", "config": {}})


def test_an_optimizer_refuses_a_schedule_of_ones_own_and_a_non_number_by_name():
    class Mine(schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.1 / (step + 1)

    class Halved(schedules.ExponentialDecay):  # a formula of its own over a built-in's arguments
        def __call__(self, step):
            return super().__call__(step) / 2

    for mine in (Mine(), Halved(0.1, 10, 0.5)):
        with pytest.raises(ValueError, match=rf"keras.optimizers.SGD: .*schedule of one's own \({type(mine).__name__}\)"):
            keras.optimizers.SGD(learning_rate=mine)
    with pytest.raises(ValueError, match=r"keras.optimizers.Adam: .*learning_rate .* not str"):
        keras.optimizers.Adam(learning_rate="0.1")


# fit with a schedule


def test_fit_with_a_schedule_trains_as_the_rates_it_gives_set_by_hand():
    """PiecewiseConstantDecay giving one rate per epoch (8 steps) trains to the same bits as fit with
    each epoch's rate set as a number: the schedule's rate reaches every step."""
    by_schedule = model(keras.optimizers.SGD(schedules.PiecewiseConstantDecay([STEPS - 1, 2 * STEPS - 1],
                                                                              [0.08, 0.02, 0.005])))
    fit(by_schedule, epochs=3)
    by_hand = model(keras.optimizers.SGD(0.08))
    for epoch, lr in enumerate((0.08, 0.02, 0.005)):
        by_hand.optimizer.learning_rate = lr
        fit(by_hand, epochs=epoch + 1, initial_epoch=epoch)
    np.testing.assert_array_equal(kernel(by_schedule), kernel(by_hand))
    assert by_schedule.optimizer.iterations == 3 * STEPS


def test_fit_with_exponential_decay_takes_hand_computed_sgd_steps():
    """Three full-batch SGD steps on a mean squared error at the rates 0.1 * 0.5^(step / 2)."""
    x, y = data()
    m = model(keras.optimizers.SGD(schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5)))
    w = kernel(m).astype(np.float64)
    for step in range(3):
        grad = 2.0 / len(x) * x.T.astype(np.float64) @ (x.astype(np.float64) @ w - y)
        w -= 0.1 * 0.5 ** (step / 2) * grad
    m.fit(x, y, batch_size=len(x), epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(kernel(m), w, rtol=2e-5, atol=1e-6)


def test_adam_and_adamw_take_a_schedule_and_report_its_current_rate():
    for cls in (keras.optimizers.Adam, keras.optimizers.AdamW):
        s = schedules.PolynomialDecay(0.01, decay_steps=2 * STEPS, end_learning_rate=0.001)
        m = model(cls(learning_rate=s))
        assert float(m.optimizer.learning_rate) == pytest.approx(0.01)
        fit(m, epochs=1)
        assert float(m.optimizer.learning_rate) == pytest.approx(float(s(STEPS)), rel=1e-6)
        assert m.optimizer.learning_rate.numpy() == s(STEPS).numpy()


def test_an_optimizer_made_with_a_schedule_refuses_a_new_rate_as_keras_3():
    sgd = keras.optimizers.SGD(schedules.ExponentialDecay(0.1, 10, 0.5))
    with pytest.raises(TypeError, match="created with a `LearningRateSchedule`.*not settable"):
        sgd.learning_rate = 0.01
    with pytest.raises(TypeError, match="not settable"):
        sgd.learning_rate.assign(0.01)
    assert float(sgd.learning_rate) == pytest.approx(0.1)


def test_a_saved_model_keeps_its_schedule(tmp_path):
    """A .keras file and a saved folder keep the schedule (not its rate then) and the optimizer's
    iterations, so that training goes on at the schedule's next rate."""
    s = schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)
    m = model(keras.optimizers.SGD(s))
    fit(m, epochs=1)
    m.save(tmp_path / "m.keras")
    m.save(tmp_path / "folder")
    for path in ("m.keras", "folder"):
        loaded = keras.models.load_model(tmp_path / path)
        with pytest.raises(TypeError, match="not settable"):  # a schedule still
            loaded.optimizer.learning_rate = 0.5
    loaded = [keras.models.load_model(tmp_path / path) for path in ("m.keras", "folder")]
    for one in loaded:
        assert one.optimizer.iterations == STEPS
        assert float(one.optimizer.learning_rate) == pytest.approx(float(s(STEPS)), rel=1e-6)
    fit(m, epochs=2, initial_epoch=1)
    for one in loaded:
        fit(one, epochs=2, initial_epoch=1)
        np.testing.assert_array_equal(kernel(one), kernel(m))


def test_a_keras_file_keeps_the_optimizers_state_so_fit_goes_on_as_if_never_saved(tmp_path):
    """model.save("x.keras") writes Keras 3's optimizer variables (iterations, the rate, Adam's m and v)
    through the C++ library; keras.models.load_model gives them back, and fit after it trains the bits
    of the run that was never saved (Adam's bias correction included)."""
    m = model(keras.optimizers.Adam(0.05))
    fit(m, epochs=1)
    m.optimizer.learning_rate = 0.02
    m.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.optimizer.iterations == STEPS
    assert float(loaded.optimizer.learning_rate) == pytest.approx(0.02)
    fit(m, epochs=2, initial_epoch=1)
    fit(loaded, epochs=2, initial_epoch=1)
    np.testing.assert_array_equal(kernel(loaded), kernel(m))


# model.optimizer.learning_rate as Keras 3 users use it


def test_the_learning_rate_reads_as_keras_variable_does():
    sgd = keras.optimizers.SGD(0.25)
    lr = sgd.learning_rate
    assert float(lr) == 0.25 and lr == 0.25 and lr.numpy() == np.float32(0.25) and lr.numpy().dtype == np.float32
    assert np.asarray(lr).dtype == np.float32 and float(np.asarray(lr)) == 0.25
    assert lr * 2 == 0.5 and 1 - lr == 0.75 and lr / 2 == 0.125 and -lr == -0.25 and lr > 0.1
    assert round(lr, 1) == 0.2 and f"{lr:.2f}" == "0.25"
    lr.assign(0.5)
    assert float(lr) == 0.5 and float(sgd.learning_rate) == 0.5  # one rate: what it reads is the optimizer's
    sgd.learning_rate = sgd.learning_rate * 0.5
    assert float(lr) == 0.25
    with pytest.raises(ValueError, match="learning_rate"):
        lr.assign("0.1")


# "learning_rate" in the logs


class EpochLogs(keras.callbacks.Callback):
    def __init__(self):
        self.logs = []

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs))


def test_reduce_lr_on_plateau_logs_the_epochs_rate_before_it_reduces_it():
    m = model(keras.optimizers.SGD(0.05))
    # Zero inputs: a kernel without a bias predicts 0 whatever it learns, so the loss never improves.
    x, y = np.zeros((STEPS * BATCH, 4), np.float32), np.ones((STEPS * BATCH, 1), np.float32)
    logs = EpochLogs()
    h = fit(m, 4, [keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1), logs], x=x, y=y)
    # Epoch 0 sets the best loss; each later one is no better, so patience 1 halves the rate at its
    # end, after its logs took the rate it trained with.
    expected = [float(np.float32(r)) for r in (0.05, 0.05, 0.025, 0.0125)]
    assert h.history["learning_rate"] == expected
    assert [entry["learning_rate"] for entry in logs.logs] == expected
    assert float(m.optimizer.learning_rate) == pytest.approx(0.00625)


def test_learning_rate_scheduler_logs_the_rate_each_epoch_trained_with():
    m = model(keras.optimizers.SGD(0.05))
    h = fit(m, 3, [keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 / (epoch + 1))])
    assert h.history["learning_rate"] == [float(np.float32(0.1 / (e + 1))) for e in range(3)]


def test_without_those_callbacks_the_logs_have_no_learning_rate():
    m = model(keras.optimizers.SGD(schedules.ExponentialDecay(0.1, 4, 0.5)))
    h = fit(m, 2, [keras.callbacks.EarlyStopping(monitor="loss", patience=5)])
    assert "learning_rate" not in h.history and "loss" in h.history
