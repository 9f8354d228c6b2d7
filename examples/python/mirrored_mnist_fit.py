"""The seeds' fit program (TensorFlow's "distributed training with Keras"), unchanged but for the
import: `import tensorflow as tf` became `import lockstep as tf`.

    python examples/python/mirrored_mnist_fit.py [output folder]

Trains the MNIST MLP under MirroredStrategy for 5 epochs, with the best model checkpointed and
TensorBoard logs, and prints the test accuracy on its last line ("test accuracy: 0.97...").
"""
import os
import sys

import lockstep as tf

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

(x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0

BUFFER_SIZE = 10000
BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
STEPS_PER_EPOCH = len(x_train) // BATCH_SIZE

train_dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                 .shuffle(BUFFER_SIZE).batch(BATCH_SIZE).repeat().prefetch(tf.data.AUTOTUNE))
test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])

checkpoint_dir = os.path.join(out_dir, "training_checkpoints")
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}")
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir=os.path.join(out_dir, "logs")),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_best_only=True),
]

history = model.fit(train_dataset, epochs=5, steps_per_epoch=STEPS_PER_EPOCH, validation_data=test_dataset,
                    callbacks=callbacks, verbose=2)
print("history keys:", sorted(history.history))

eval_loss, eval_acc = model.evaluate(test_dataset, verbose=0)
print("test loss: {:.4f}".format(eval_loss))
print("test accuracy: {:.4f}".format(eval_acc))
