"""A fit that test_interrupt.py stops with SIGINT and resumes: `python fit_to_interrupt.py DIR`.

Trains a small MNIST MLP for 20 epochs with BackupAndRestore(DIR/backup) and CSVLogger(DIR/log.csv)
(the test watches it to know training is under way). Ctrl-C prints "interrupted" and exits 130; a
finished run writes its predictions on 100 test images to DIR/predictions.npy. Run again on the same
DIR, it resumes from the backup.
"""
import os
import sys

import numpy as np

import lockstep as tf

out = sys.argv[1]
(x, y), (x_test, _) = tf.keras.datasets.mnist.load_data()
x, y, x_test = x[:2000] / np.float32(255), y[:2000], x_test[:100] / np.float32(255)

tf.keras.utils.set_random_seed(7)
with tf.distribute.MirroredStrategy().scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2000).batch(32).repeat()
callbacks = [tf.keras.callbacks.BackupAndRestore(os.path.join(out, "backup")),
             tf.keras.callbacks.CSVLogger(os.path.join(out, "log.csv"), append=True)]
try:
    model.fit(train, epochs=20, steps_per_epoch=60, callbacks=callbacks, verbose=0)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
np.save(os.path.join(out, "predictions.npy"), model.predict(x_test))
