"""tf.train.Checkpoint / CheckpointManager / latest_checkpoint: the TF custom-loop tutorial's checkpoint
step (save every 2 epochs, restore into a fresh model under the strategy, equal accuracy), and the
errors a damaged or missing checkpoint gives."""
import os

import numpy as np
import pytest

import lockstep as tf


def _model_and_optimizer():
    model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                                 tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
    return model, tf.keras.optimizers.Adam(0.01)


def _accuracy(model, x, y):
    predictions = tf.argmax(model(x), axis=1)
    return float(tf.reduce_mean(tf.cast(tf.math.equal(predictions, tf.cast(y, tf.int64)), tf.float32)))


def _train_epochs(strategy, model, optimizer, x, y, epochs, checkpoint=None, prefix=None):
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(labels, model(images, training=True)), global_batch_size=64)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    saved = []
    for epoch in range(epochs):
        for batch in strategy.experimental_distribute_dataset(ds):
            strategy.run(train_step, args=(batch,))
        if checkpoint is not None and epoch % 2 == 0:
            saved.append(checkpoint.save(prefix))
    return saved


def test_tutorial_checkpoint_restores_into_a_fresh_model_under_the_strategy(mnist_small, tmp_path):
    (x, y), (x_test, y_test) = mnist_small
    x, y = x[:1024], y[:1024]
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model, optimizer = _model_and_optimizer()
    checkpoint_dir = str(tmp_path / "training_checkpoints")
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)
    saved = _train_epochs(strategy, model, optimizer, x, y, 5, checkpoint, os.path.join(checkpoint_dir, "ckpt"))
    assert [os.path.basename(p) for p in saved] == ["ckpt-1", "ckpt-2", "ckpt-3"]  # epochs 0, 2, 4
    assert checkpoint.save_counter == 3
    assert tf.train.latest_checkpoint(checkpoint_dir) == saved[-1]

    with strategy.scope():
        new_model, new_optimizer = _model_and_optimizer()
    assert _accuracy(new_model, x_test, y_test) != _accuracy(model, x_test, y_test)
    status = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model).restore(
        tf.train.latest_checkpoint(checkpoint_dir))
    status.assert_consumed()
    assert _accuracy(new_model, x_test, y_test) == _accuracy(model, x_test, y_test) > 0.5
    assert new_optimizer.iterations == optimizer.iterations == 5 * 16
    # The optimizer's slots came back too: one more epoch on both keeps them identical.
    _train_epochs(strategy, model, optimizer, x, y, 1)
    _train_epochs(strategy, new_model, new_optimizer, x, y, 1)
    for a, b in zip(model.trainable_variables, new_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_checkpoint_manager_keeps_the_newest(tmp_path):
    model, optimizer = _model_and_optimizer()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2)
    assert manager.latest_checkpoint is None and manager.restore_or_initialize() is None
    paths = [manager.save() for _ in range(3)]
    assert manager.checkpoints == paths[1:] and manager.latest_checkpoint == paths[2]
    assert not os.path.exists(paths[0] + ".safetensors")
    again = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=None)
    assert again.latest_checkpoint == paths[2]  # read from the directory's `checkpoint` file
    assert again.save().endswith("ckpt-4")


def test_missing_and_damaged_checkpoints_are_named(tmp_path):
    model, optimizer = _model_and_optimizer()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    assert tf.train.latest_checkpoint(str(tmp_path / "none")) is None
    checkpoint.restore(None).expect_partial()  # TensorFlow's "nothing saved yet": a no-op
    with pytest.raises(OSError, match="nowhere"):
        checkpoint.restore(str(tmp_path / "nowhere"))
    path = checkpoint.save(str(tmp_path / "ckpt"))
    with open(path + ".safetensors", "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\0\1\2\3")
    with pytest.raises(OSError, match="ckpt-1"):
        checkpoint.restore(path)
    other = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)), tf.keras.layers.Dense(5)])
    path = checkpoint.save(str(tmp_path / "ckpt"))
    with pytest.raises((OSError, ValueError), match="dense"):
        tf.train.Checkpoint(model=other).restore(path)
    with open(tmp_path / "checkpoint", "w") as f:
        f.write("{not json")
    with pytest.raises(OSError, match="checkpoint"):
        tf.train.latest_checkpoint(str(tmp_path))


def test_checkpoint_refuses_what_it_cannot_save():
    with pytest.raises(ValueError, match="step=int"):
        tf.train.Checkpoint(step=3)
    unbuilt = tf.keras.Sequential([tf.keras.layers.Dense(5)])
    with pytest.raises(ValueError, match="not built"):
        tf.train.Checkpoint(model=unbuilt).save("/tmp/never/ckpt")
    with pytest.raises(AttributeError, match="tf.train.Checkpoint.write"):
        tf.train.Checkpoint().write
