#!/usr/bin/env python3
"""TF/Keras reference for bench/mixed_precision_bench: the same deep MLP
(LAYERS x Dense(UNITS, relu) -> Dense(10, softmax, dtype float32), Adam(1e-4),
sparse categorical cross-entropy, batch BATCH, random normal inputs) under the
float32 and mixed_bfloat16 policies: steps/s of train_on_batch after warm-up, best of ROUNDS.

    .venv-ref/bin/python bench/reference_mixed_precision.py [--units 2048] [--layers 8]
        [--batch 256] [--steps 30] [--rounds 3] [--threads N]

Needs TensorFlow (scripts/setup_python.sh makes .venv-ref); exits 3 when it is missing.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--units", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TF's default)")
    a = p.parse_args()
    try:
        import numpy as np
        import tensorflow as tf
        import keras
    except ImportError as e:
        print(f"reference_mixed_precision: {e} (run scripts/setup_python.sh)", file=sys.stderr)
        return 3
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((a.batch, a.units), dtype=np.float32)
    y = rng.integers(0, 10, size=(a.batch,)).astype(np.int64)

    def run(policy: str) -> float:
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(1)
        layers = [keras.Input((a.units,))]
        layers += [keras.layers.Dense(a.units, activation="relu") for _ in range(a.layers)]
        layers += [keras.layers.Dense(10, activation="softmax", dtype="float32")]
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy")
        for _ in range(3):
            model.train_on_batch(x, y)
        t0 = time.perf_counter()
        for _ in range(a.steps):
            model.train_on_batch(x, y)
        keras.mixed_precision.set_global_policy("float32")
        return a.steps / (time.perf_counter() - t0)

    best = {"float32": 0.0, "mixed_bfloat16": 0.0}
    for _ in range(a.rounds):
        for policy in best:
            best[policy] = max(best[policy], run(policy))
    print(f"TF {tf.__version__} / Keras {keras.__version__}: deep MLP {a.layers} x Dense({a.units}), batch {a.batch}")
    for policy, sps in best.items():
        print(f"{policy:16s} {sps:10.2f} steps/s  ({sps / best['float32']:.2f} x float32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
