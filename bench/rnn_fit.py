#!/usr/bin/env python3
"""Times a Keras recurrent text classifier's training step under lockstep's Python package,
TensorFlow (the same Keras code, only the import differs) or PyTorch (the same model by hand).

The model (keras.io's "text classification with an RNN" shape): Embedding(vocab, embed) ->
LSTM(units) or GRU(units) -> Dense(1, sigmoid); binary cross-entropy, Adam(1e-3). The data:
fixed-seed random token ids of --length steps (no padding, so no mask: the same work in every
framework) and 0/1 labels; the timing does not depend on what is learned.

    python bench/rnn_fit.py --framework lockstep|tensorflow|torch [--layer lstm|gru] [--batch 64]
        [--length 100] [--units 64] [--embed 64] [--vocab 10000] [--steps 60] [--threads 2]
        [--tf-threads default|tuned]

Prints one JSON line {"framework", "layer", "steps_per_second", ...}: the second of two epochs of
--steps steps (the first warms up: graph capture, tracing, allocator caches). Keras paths are timed
by a LambdaCallback at the epochs' ends, torch by the same two marks around its loop.
Keras' GRU is reset_after=True (PyTorch's nn.GRU's formula); LSTM's gates match nn.LSTM's.
"""
import argparse
import json
import os
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--framework", choices=["lockstep", "tensorflow", "torch"], required=True)
ap.add_argument("--layer", choices=["lstm", "gru"], default="lstm")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--length", type=int, default=100)
ap.add_argument("--units", type=int, default=64)
ap.add_argument("--embed", type=int, default=64)
ap.add_argument("--vocab", type=int, default=10000)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--tf-threads", choices=["default", "tuned"], default="default")
args = ap.parse_args()
if min(args.batch, args.length, args.units, args.embed, args.vocab, args.steps, args.threads) < 1:
    ap.error("every size must be positive")

rng = np.random.default_rng(0)
n = args.batch * args.steps
x = rng.integers(0, args.vocab, size=(n, args.length), dtype=np.int64)
y = (x[:, 0] % 2).astype(np.float32).reshape(-1, 1)


def keras_run(tf):
    layers = tf.keras.layers
    recurrent = layers.LSTM if args.layer == "lstm" else layers.GRU
    model = tf.keras.Sequential([
        layers.Input((args.length,), dtype="int32"),
        layers.Embedding(args.vocab, args.embed),
        recurrent(args.units),
        layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    data = tf.data.Dataset.from_tensor_slices((x.astype(np.int32), y)).batch(args.batch).repeat()
    marks = []
    mark = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: marks.append(time.perf_counter()))
    model.fit(data, epochs=2, steps_per_epoch=args.steps, verbose=0, callbacks=[mark])
    return args.steps / (marks[-1] - marks[0])


def torch_run():
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cell = torch.nn.LSTM if args.layer == "lstm" else torch.nn.GRU

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(args.vocab, args.embed)
            self.rnn = cell(args.embed, args.units, batch_first=True)
            self.out = torch.nn.Linear(args.units, 1)

        def forward(self, tokens):
            seq, _ = self.rnn(self.embed(tokens))
            return self.out(seq[:, -1])  # logits; the loss applies the sigmoid

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    marks = []
    for epoch in range(2):
        for i in range(args.steps):
            sl = slice(i * args.batch, (i + 1) * args.batch)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xs[sl]), ys[sl])
            loss.backward()
            opt.step()
        loss.item()
        marks.append(time.perf_counter())
    return args.steps / (marks[-1] - marks[0])


if args.framework == "torch":
    steps_per_second = torch_run()
elif args.framework == "lockstep":
    os.environ.setdefault("LOCKSTEP_CPU_THREADS", str(args.threads))
    import lockstep

    steps_per_second = keras_run(lockstep)
else:
    import tensorflow

    if args.tf_threads == "tuned":
        tensorflow.config.threading.set_intra_op_parallelism_threads(args.threads)
        tensorflow.config.threading.set_inter_op_parallelism_threads(1)
    steps_per_second = keras_run(tensorflow)
print(json.dumps({"framework": args.framework, "layer": args.layer, "batch": args.batch, "length": args.length,
                  "units": args.units, "tf_threads": args.tf_threads if args.framework == "tensorflow" else None,
                  "threads": args.threads, "steps_per_second": round(steps_per_second, 2)}))
