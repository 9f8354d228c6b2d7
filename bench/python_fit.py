"""Times the seeds' fit program (examples/python/mirrored_mnist_fit.py's model and input) under
lockstep's Python package or TensorFlow itself, with the same code: only the import differs.

    python bench/python_fit.py --framework lockstep|tensorflow [--epochs 2] [--batch-per-replica 64]
                               [--tf-threads default|tuned]

Prints one JSON line: {"framework", "replicas", "steps", "steps_per_second", "examples_per_second"}:
TensorFlow's timed by a callback at the epochs' ends, after the first epoch; lockstep's History
carries its own steps_per_second (the last epoch's, the measure `lockstep train --metrics-out` gives).
TensorFlow on CPUs mirrors over one device, so compare examples_per_second across frameworks.
--tf-threads tuned sets TensorFlow's intra-op threads to the cores and inter-op to 1 (docs/PERFORMANCE.md's
fair references: the faster of tuned and default counts); default leaves TF's own choice.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_mlp import load_mnist_train  # noqa: E402 (the IDX files lockstep reads; no download)

ap = argparse.ArgumentParser()
ap.add_argument("--framework", choices=["lockstep", "tensorflow"], required=True)
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--batch-per-replica", type=int, default=64)
ap.add_argument("--tf-threads", choices=["default", "tuned"], default="default")
args = ap.parse_args()
if args.framework == "lockstep":
    import lockstep as tf
else:
    import tensorflow as tf

    if args.tf_threads == "tuned":
        tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count())
        tf.config.threading.set_inter_op_parallelism_threads(1)

strategy = tf.distribute.MirroredStrategy()
x_train, y_train, _ = load_mnist_train()  # float32 in [0, 1], (60000, 784)
x_train = x_train.reshape(-1, 28, 28)
batch = args.batch_per_replica * strategy.num_replicas_in_sync
steps = len(x_train) // batch
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).batch(batch).repeat()
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

if args.framework == "lockstep":
    history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=0)
    steps_per_second = history.history["steps_per_second"][-1]
else:
    marks = []
    mark = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: marks.append(time.perf_counter()))
    model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=0, callbacks=[mark])
    seconds = marks[-1] - marks[0]
    steps_per_second = steps * (args.epochs - 1) / seconds
print(json.dumps({"framework": args.framework, "tf_threads": args.tf_threads if args.framework == "tensorflow" else None,
                  "replicas": strategy.num_replicas_in_sync, "steps": steps,
                  "steps_per_second": round(steps_per_second, 1),
                  "examples_per_second": round(steps_per_second * batch)}))
