"""The custom loop in Python: tf.Tensor, GradientTape, strategy.run on the replicas' threads,
strategy.reduce, metrics objects, and the seeds' custom-loop program."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import lockstep as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tensors_round_trip_numpy_and_do_arithmetic():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tf.constant(a)
    assert isinstance(t, tf.Tensor) and t.shape == (2, 3) and t.dtype == tf.float32
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_allclose((1.0 + t * 2 - t / 2).numpy(), 1.0 + a * 2 - a / 2)
    np.testing.assert_allclose((t - 1).numpy(), a - 1)
    np.testing.assert_allclose((10.0 - t).numpy(), 10.0 - a)
    total = tf.reduce_sum(t)
    assert float(total) == 15.0 and "{:.2f}".format(tf.reduce_mean(t)) == "2.50"
    assert repr(total) == "tf.Tensor(15.0, shape=(), dtype=float32)"
    np.testing.assert_array_equal(tf.reduce_sum(t, axis=0).numpy(), a.sum(axis=0))
    assert tf.cast(t, tf.int32).dtype == "int32"
    assert tf.constant(np.arange(3.0)).dtype == "float32"  # float64 is Keras' floatx, float32
    with pytest.raises(ValueError, match="one element"):
        float(t)
    with pytest.raises(ValueError, match="complex"):
        tf.constant(np.zeros(2, dtype=np.complex64))


def test_gradient_tape_gives_gradients_after_the_block():
    v = tf.Variable(np.array([1.0, 2.0, 3.0], dtype=np.float32), name="v")
    unused = tf.Variable(np.ones(2, dtype=np.float32))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v * v * 3.0)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [6.0, 12.0, 18.0])
    x = tf.constant(np.array([2.0], dtype=np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(x * x)
    grads = tape.gradient(y, [x, unused])
    np.testing.assert_allclose(grads[0].numpy(), [4.0])
    assert grads[1] is None  # TensorFlow's None for a source the target does not depend on
    with pytest.raises(ValueError, match="twice"):
        once = tf.GradientTape()
        with once:
            y = tf.reduce_sum(v * v)
        once.gradient(y, [v])
        once.gradient(y, [v])


def test_metrics_objects():
    mean = tf.keras.metrics.Mean(name="loss")
    mean.update_state(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    mean.update_state(np.array([6.0], dtype=np.float32))
    assert float(mean.result()) == pytest.approx(3.0)
    accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(np.array([0, 1]), np.array([[0.9, 0.1], [0.8, 0.2]], dtype=np.float32))
    assert accuracy.result().numpy() == pytest.approx(0.5)
    accuracy.reset_state()
    assert float(accuracy.result()) == 0.0


def test_tf_function_runs_the_function_with_its_options():
    @tf.function(jit_compile=True, reduce_retracing=True)
    def double(x):
        return x * 2.0

    assert float(double(tf.constant(np.float32(2.0)))) == 4.0
    assert tf.function(lambda: 3)() == 3


def _train(strategy, x, y, steps, global_batch):
    tf.keras.utils.set_random_seed(7)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                                     tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        optimizer = tf.keras.optimizers.SGD(0.1)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(labels, model(images, training=True)),
                                              global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).take(steps)
    losses = [float(strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(train_step, args=(batch,)), axis=None))
              for batch in strategy.experimental_distribute_dataset(ds)]
    return losses, [v.numpy() for v in model.trainable_variables], optimizer.iterations


def test_two_replicas_train_as_one_device(mnist_small):
    """strategy.run on two replicas' threads, all-reducing in apply_gradients, takes the steps one
    device takes on the whole batch."""
    (x, y), _ = mnist_small
    one_losses, one_weights, one_steps = _train(tf.distribute.OneDeviceStrategy("cpu:0"), x, y, 5, 64)
    two_losses, two_weights, two_steps = _train(tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"]), x, y, 5, 64)
    assert one_steps == two_steps == 5
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    assert two_losses[-1] < two_losses[0]
    for a, b in zip(one_weights, two_weights):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_run_gives_per_replica_values_and_reduce_sums_them():
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    ids = []
    per_replica = strategy.run(lambda v: (ids.append(v) or tf.constant(np.float32(v)), None), args=(2.0,))
    assert isinstance(per_replica[0], tf.distribute.PerReplica) and ids == [2.0, 2.0]
    assert float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[0], axis=None)) == 4.0
    assert float(strategy.reduce("MEAN", per_replica[0], axis=None)) == 2.0
    assert strategy.run(lambda: None) is None
    vectors = strategy.run(lambda: tf.constant(np.array([1.0, 2.0, 3.0], dtype=np.float32)))
    assert float(strategy.reduce(tf.distribute.ReduceOp.SUM, vectors, axis=0)) == 12.0


def test_an_exception_in_a_replica_function_is_raised_as_it_was(mnist_small):
    """A replica that raises while the other waits in apply_gradients' all-reduce: the other is
    released, and the caller gets the Python exception itself (no hang, no deadlock on the GIL)."""
    (x, y), _ = mnist_small
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)), tf.keras.layers.Dense(10)])
        optimizer = tf.keras.optimizers.SGD(0.1)
    seen = []

    def train_step(inputs):
        images, labels = inputs
        seen.append(len(seen))
        if len(seen) == 2:
            raise KeyError("replica failure")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(images, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    batch = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))))
    with pytest.raises(KeyError, match="replica failure"):
        strategy.run(train_step, args=(batch,))


def test_a_model_made_outside_the_scope_is_refused_in_run(mnist_small):
    (x, y), _ = mnist_small
    model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)), tf.keras.layers.Dense(10)])
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    optimizer = tf.keras.optimizers.SGD(0.1)

    def train_step(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(inputs[0], training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    batch = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))))
    with pytest.raises(ValueError, match="scope"):
        strategy.run(train_step, args=(batch,))


def test_seed_custom_loop_program():
    """The seeds' custom loop with only the import changed reaches 0.97 test accuracy."""
    script = os.path.join(REPO, "examples", "python", "mirrored_mnist_custom_loop.py")
    env = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}  # two replicas, as on CI's two cores
    run = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Number of devices: 2" in run.stdout
    accuracy = float(run.stdout.strip().splitlines()[-1].split(":")[1])
    assert accuracy >= 0.97, run.stdout


def test_ctrl_c_during_the_custom_loop_raises_keyboard_interrupt():
    """SIGINT while the replicas run Python (the main thread is replica 0): KeyboardInterrupt ends the
    program, the other replica released from its all-reduce, no hang."""
    script = os.path.join(REPO, "examples", "python", "mirrored_mnist_custom_loop.py")
    env = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}
    run = subprocess.Popen([sys.executable, "-u", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
    try:
        assert run.stdout.readline().startswith("Number of devices: 2")
        assert run.stdout.readline().startswith("Epoch 1,")  # training epoch 2 now
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)  # a guard against a hang, not a timing
    finally:
        run.kill()
    assert run.returncode != 0
    assert err.strip().splitlines()[-1] == "KeyboardInterrupt", err
