"""One image resize's training cost under TensorFlow or PyTorch, the references of
bench/compare_resize.sh: the forward and the backward to the images, as a training step runs them.
TensorFlow: tf.image.resize (what Keras 3's Resizing and UpSampling2D run on its TensorFlow
backend) under a GradientTape, eager and in a tf.function (the faster counts). PyTorch:
torch.nn.functional.interpolate with align_corners=False (half-pixel centres, TensorFlow's),
on NCHW as PyTorch lays images out, for the methods it has (bilinear, bicubic, nearest, area).

  reference_resize.py --framework tf|torch N H W C OUT_H OUT_W METHOD ANTIALIAS(0|1) REPS [--threads T]
Prints the median milliseconds of REPS forward + backward passes (after one to warm up); "nan"
where the framework lacks the method.
"""
import argparse
import statistics
import sys
import time

import numpy as np


def timed(step, reps):
    step()
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def tensorflow(a, x, dy):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x, dy = tf.constant(x), tf.constant(dy)

    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.image.resize(x, (a.out_h, a.out_w), method=a.method, antialias=a.antialias == 1)
        return tape.gradient(y, x, output_gradients=dy)

    compiled = tf.function(step)
    return min(timed(lambda: step().numpy(), a.reps), timed(lambda: compiled().numpy(), a.reps))


def torch_reference(a, x, dy):
    import torch
    torch.set_num_threads(a.threads)
    modes = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest", "area": "area"}
    if a.method not in modes:
        return float("nan")
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    dyt = torch.tensor(dy).permute(0, 3, 1, 2).contiguous()
    kwargs = {"align_corners": False} if a.method in ("bilinear", "bicubic") else {}
    if a.antialias:
        kwargs["antialias"] = True

    def step():
        y = torch.nn.functional.interpolate(xt, size=(a.out_h, a.out_w), mode=modes[a.method], **kwargs)
        (g,) = torch.autograd.grad(y, xt, dyt)
        return g

    try:
        return timed(step, a.reps)
    except (TypeError, RuntimeError, NotImplementedError):  # antialias or a mode this torch lacks
        return float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--framework", choices=("tf", "torch"), required=True)
    p.add_argument("--threads", type=int, default=2)
    for name in ("n", "h", "w", "c", "out_h", "out_w"):
        p.add_argument(name, type=int)
    p.add_argument("method")
    p.add_argument("antialias", type=int, choices=(0, 1))
    p.add_argument("reps", type=int)
    a = p.parse_args()
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (a.n, a.h, a.w, a.c)).astype(np.float32)
    dy = rng.uniform(-1, 1, (a.n, a.out_h, a.out_w, a.c)).astype(np.float32)
    ms = tensorflow(a, x, dy) if a.framework == "tf" else torch_reference(a, x, dy)
    print(f"{ms:.4f}")


if __name__ == "__main__":
    sys.exit(main())
