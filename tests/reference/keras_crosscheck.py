#!/usr/bin/env python3
"""Checks the torch reference itself against real Keras (run inside .venv-ref).

Trains Keras' Sequential([Dense(H, relu), Dense(C, softmax)]) with
Adam(1e-3) and SparseCategoricalCrossentropy from an agreement DIR's initial
weights on its batches (train_on_batch, one update per step), and compares the
per-step loss and final weights with torch_agreement.run_reference. This is
what justifies the reference's choices (logits loss, Keras' Adam) instead of
taking them on trust.

    .venv-ref/bin/python tests/reference/keras_crosscheck.py DIR [--rtol 1e-4]

Exit 0 if both loss modes were examined and the --loss mode (default logits)
agrees within --rtol, 1 otherwise, 2 on bad input or no TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_agreement import (LOSS_MODES, PARAM_NAMES, AdamConfig, InputError,  # noqa: E402
                             load_inputs, rel_err, run_reference)


def keras_run(init, x, y):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    n_in, n_hidden = init["w0"].shape
    n_classes = init["w1"].shape[1]
    model = keras.Sequential([
        keras.Input(shape=(n_in,)),
        keras.layers.Dense(n_hidden, activation="relu"),
        keras.layers.Dense(n_classes, activation="softmax"),
    ])
    model.layers[0].set_weights([init["w0"], init["b0"]])
    model.layers[1].set_weights([init["w1"], init["b1"]])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy())
    losses = []
    for s in range(x.shape[0]):
        # train_on_batch returns the loss of the forward pass before the update.
        out = model.train_on_batch(x[s], y[s])
        losses.append(float(out[0] if isinstance(out, (list, tuple)) else out))
    w0, b0 = model.layers[0].get_weights()
    w1, b1 = model.layers[1].get_weights()
    return np.asarray(losses, np.float32), {"w0": w0, "b0": b0, "w1": w1, "b1": b1}, tf.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Cross-check the torch reference against real Keras.")
    ap.add_argument("dir")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--loss", choices=LOSS_MODES, default="logits",
                    help="the reference loss mode that must agree with Keras (default logits)")
    args = ap.parse_args(argv)
    try:
        init, x, y, _, _ = load_inputs(args.dir)
    except InputError as e:
        print(f"keras_crosscheck: error: {e}", file=sys.stderr)
        return 2
    try:
        k_loss, k_params, tf_version = keras_run(init, x, y)
    except ImportError as e:
        print(f"keras_crosscheck: error: TensorFlow unavailable ({e}); run scripts/setup_python.sh "
              "and use .venv-ref/bin/python", file=sys.stderr)
        return 2
    print(f"keras_crosscheck: TensorFlow {tf_version}, {x.shape[0]} steps x batch {x.shape[1]}")
    print(f"{'tensor':8s} " + " ".join(f"{'rel vs ' + m:>22s}" for m in LOSS_MODES))
    worst = {}
    refs = {m: run_reference(init, x, y, "float32", m, AdamConfig()) for m in LOSS_MODES}
    for name in ("loss",) + PARAM_NAMES:
        cells = []
        for m in LOSS_MODES:
            r_loss, r_params = refs[m]
            e = rel_err(k_loss if name == "loss" else k_params[name], r_loss if name == "loss" else r_params[name])
            worst[m] = max(worst.get(m, 0.0), e)
            cells.append(f"{e:22.3e}")
        print(f"{name:8s} " + " ".join(cells))
    ok = worst[args.loss] <= args.rtol
    print(f"Keras matches the '{args.loss}' reference within rtol={args.rtol:g}: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
