#!/usr/bin/python3
"""Writes a self-consistent agreement directory for torch_agreement.py.

The inputs (w0, b0, w1, b1, x, y) are what lockstep would be given: Keras'
initialisation (glorot-uniform kernels, zero biases), x uniform in [0, 1),
uniform random labels. The "lockstep" results (lockstep_*.npy) are computed by
the same float32 reference torch_agreement.py uses, so an unperturbed fixture
must agree exactly; --perturb P adds a relative error of P to every result
tensor (each element moves by P * max|tensor| with a random sign), so the
check must then fail for any rtol < P.

    /usr/bin/python3 tests/reference/make_agreement_fixture.py DIR [--steps 20] [--batch 64]
        [--in 784 --hidden 128 --classes 10] [--seed 0] [--perturb 0] [--loss logits]

Also useful for the C++ side: `--inputs-only` writes only the inputs, for a
lockstep test that reads them, trains and writes lockstep_*.npy next to them.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_agreement import LOSS_MODES, PARAM_NAMES, AdamConfig, run_reference  # noqa: E402


def glorot_uniform(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--in", dest="n_in", type=int, default=784)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--perturb", type=float, default=0.0,
                    help="relative error added to every lockstep_* tensor (default 0)")
    ap.add_argument("--loss", choices=LOSS_MODES, default="logits")
    ap.add_argument("--init-scale", type=float, default=1.0,
                    help="multiply both glorot kernels by this; e.g. 6 saturates the softmax (loss ~100), "
                         "a badly conditioned run that tells the loss modes and Adam's constant rounding apart")
    ap.add_argument("--inputs-only", action="store_true", help="write only w0,b0,w1,b1,x,y")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    init = {
        "w0": glorot_uniform(rng, args.n_in, args.hidden) * np.float32(args.init_scale),
        "b0": np.zeros(args.hidden, np.float32),
        "w1": glorot_uniform(rng, args.hidden, args.classes) * np.float32(args.init_scale),
        "b1": np.zeros(args.classes, np.float32),
    }
    x = rng.random((args.steps, args.batch, args.n_in), dtype=np.float32)
    y = rng.integers(0, args.classes, size=(args.steps, args.batch), dtype=np.int64)

    os.makedirs(args.dir, exist_ok=True)
    for n in PARAM_NAMES:
        np.save(os.path.join(args.dir, n + ".npy"), init[n])
    np.save(os.path.join(args.dir, "x.npy"), x)
    np.save(os.path.join(args.dir, "y.npy"), y)
    if args.inputs_only:
        print(f"wrote inputs for {args.steps} steps x batch {args.batch} to {args.dir}")
        return 0

    loss, final = run_reference(init, x, y, "float32", args.loss, AdamConfig())
    results = {"loss": loss, **final}
    for name, t in results.items():
        if args.perturb:
            sign = rng.choice(np.array([-1.0, 1.0]), size=t.shape)
            t = (t + args.perturb * np.abs(t).max() * sign).astype(np.float32)
        np.save(os.path.join(args.dir, "lockstep_" + name + ".npy"), t.astype(np.float32))
    print(f"wrote fixture ({args.steps} steps x batch {args.batch}, perturb={args.perturb:g}) to {args.dir}; "
          f"loss {float(loss[0]):.4f} -> {float(loss[-1]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
