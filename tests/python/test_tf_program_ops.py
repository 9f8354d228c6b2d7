"""What TF custom-loop programs use beyond the loop itself: metric objects under any name in compile,
Tensor indexing, integer tensors, comparisons and accuracy by hand, tf.distribute's contexts and
distribute_datasets_from_function."""
import numpy as np
import pytest

import lockstep as tf
from conftest import mlp


def test_compile_takes_metric_objects_under_any_name(mnist_small):
    (x, y), _ = mnist_small
    model = mlp(tf)
    accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=[accuracy, "accuracy"])
    assert model.metrics_names == ["loss", "train_accuracy", "accuracy"]
    history = model.fit(x[:512], y[:512], batch_size=64, epochs=1, verbose=0)
    assert {"loss", "train_accuracy", "accuracy"} <= set(history.history)
    assert history.history["train_accuracy"] == pytest.approx(history.history["accuracy"])
    assert float(accuracy.result()) == pytest.approx(history.history["train_accuracy"][-1])  # the object itself
    logs = model.evaluate(x[:256], y[:256], verbose=0, return_dict=True)
    assert set(logs) == {"loss", "train_accuracy", "accuracy"}
    with pytest.raises(ValueError, match="train_accuracy"):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=[accuracy, tf.keras.metrics.Accuracy(name="train_accuracy")])
    with pytest.raises(ValueError, match="lockstep takes metrics by name"):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=[3])


def test_tensor_indexing_on_the_leading_axis():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = tf.constant(a)
    np.testing.assert_array_equal(t[1].numpy(), a[1])
    np.testing.assert_array_equal(t[-1].numpy(), a[-1])
    np.testing.assert_array_equal(t[np.int64(2)].numpy(), a[2])
    np.testing.assert_array_equal(t[1:3].numpy(), a[1:3])
    np.testing.assert_array_equal(t[::-2].numpy(), a[::-2])
    assert t[3:1].shape == (0, 3)
    assert [row.shape for row in t] == [(3,)] * 4  # iteration stops at the IndexError
    assert float(tf.constant(np.array([5, 6], dtype=np.int32))[1]) == 6
    with pytest.raises(IndexError, match="4"):
        t[4]
    with pytest.raises(ValueError, match=r"\(slice\(None, None, None\), 0\)"):
        t[:, 0]
    with pytest.raises(ValueError, match="scalar"):
        tf.constant(np.float32(1))[0]
    v = tf.Variable(a)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v[1:3] * 2.0)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), np.array([[0] * 3, [2] * 3, [2] * 3, [0] * 3]))


def test_integer_tensors_and_accuracy_by_hand():
    i = tf.constant(np.array([1, 2, 3], dtype=np.int32))
    with pytest.raises(ValueError, match="got int32 of shape \\(3,\\) \\(cast it first\\)"):
        i + 1  # lockstep's arithmetic is on floating tensors: a clear error, not a silent float result
    np.testing.assert_array_equal((tf.cast(i, tf.float32) * 2).numpy(), [2, 4, 6])
    logits = tf.constant(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=np.float32))
    labels = tf.constant(np.array([1, 0, 0, 0], dtype=np.int64))
    predictions = tf.argmax(logits, axis=1)
    assert predictions.dtype == tf.int64
    correct = tf.math.equal(predictions, labels)
    assert float(tf.reduce_mean(tf.cast(correct, tf.float32))) == 0.75
    np.testing.assert_array_equal((logits > 0.5).numpy(), [[0, 1], [1, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(tf.not_equal(predictions, labels).numpy(), [0, 0, 1, 0])


def test_replica_context_and_get_strategy():
    context = tf.distribute.get_replica_context()
    assert context.num_replicas_in_sync == 1 and context.replica_id_in_sync_group == 0
    default = tf.distribute.get_strategy()
    assert default.num_replicas_in_sync == 1 and not tf.distribute.has_strategy()
    with default.scope():
        assert default.run(lambda a: a + 1, args=(1,)) == 2
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        assert tf.distribute.get_strategy() is strategy
        assert tf.distribute.get_replica_context() is None and tf.distribute.in_cross_replica_context()

    def step():
        ctx = tf.distribute.get_replica_context()
        assert tf.distribute.get_strategy() is strategy
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(np.float32(ctx.replica_id_in_sync_group + 1)))
        return ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync, float(total)

    ids, counts, totals = strategy.run(step)
    assert ids.values == (0, 1) and counts.values == (2, 2) and totals.values == (3.0, 3.0)


def test_distribute_datasets_from_function_gives_each_replica_its_batch():
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    contexts = []

    def dataset_fn(input_context):
        contexts.append(input_context)
        batch = input_context.get_per_replica_batch_size(8)
        x = np.arange(32, dtype=np.float32).reshape(16, 2)
        return tf.data.Dataset.from_tensor_slices((x, np.arange(16))).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id).batch(batch)

    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    (ctx,) = contexts
    assert isinstance(ctx, tf.distribute.InputContext)
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (1, 0, 2)
    assert ctx.get_per_replica_batch_size(8) == 4
    with pytest.raises(ValueError, match="7"):
        ctx.get_per_replica_batch_size(7)
    firsts = [strategy.run(lambda inputs: float(inputs[1][0]), args=(batch,)).values for batch in distributed]
    assert firsts == [(0.0, 4.0), (8.0, 12.0)]
    with pytest.raises(ValueError, match="must return a tf.data.Dataset"):
        strategy.distribute_datasets_from_function(lambda ctx: [1, 2])


def test_where_picks_a_side_and_sends_the_gradient_there():
    # tf.where(condition, x, y): a NumPy bool condition, broadcasting, a number on one side; the
    # side not chosen (an infinity here) never reaches the result.
    x = tf.Variable(np.array([[1.0, -np.inf, 3.0], [4.0, 5.0, np.inf]], np.float32))
    keep = np.array([True, False, True])
    with tf.GradientTape() as tape:
        y = tf.where(keep, x, 0.0)
        loss = tf.reduce_sum(y * y)
    np.testing.assert_array_equal(y.numpy(), [[1, 0, 3], [4, 0, np.inf]])
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy()[0], [2, 0, 6])
    np.testing.assert_array_equal(tf.where(tf.greater(x, 2.0), -1.0, x).numpy()[0], [1, -np.inf, -1])
    with pytest.raises(ValueError, match=r"tf.where\(condition\) \(the indices"):
        tf.where(keep)
    with pytest.raises(ValueError, match="where: expected a floating tensor"):
        tf.where(keep, np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32))
