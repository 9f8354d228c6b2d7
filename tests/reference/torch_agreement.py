#!/usr/bin/python3
"""Checks lockstep's numbers against a hand-written PyTorch reference.

Run with /usr/bin/python3 (Debian's python3-torch + python3-numpy); needs
nothing else.

    /usr/bin/python3 tests/reference/torch_agreement.py DIR [--rtol 1e-4]

Contract: DIR holds .npy files (written by lockstep, or by
make_agreement_fixture.py):

  inputs (the initial state and the data, written before training)
    w0.npy  (IN, H)   float32  first Dense kernel, Keras layout (in, out): y = x @ W + b
    b0.npy  (H,)      float32
    w1.npy  (H, C)    float32  second Dense kernel, Keras layout
    b1.npy  (C,)      float32
    x.npy   (S, B, IN) float32 the batch of each of S steps
    y.npy   (S, B)    int64    labels in [0, C)  (int32 is accepted too)
  lockstep's results
    lockstep_loss.npy (S,)  float32  mean loss over step s's batch, from the forward
                                     pass BEFORE step s's update
    lockstep_w0.npy, lockstep_b0.npy, lockstep_w1.npy, lockstep_b1.npy
                      same shapes/dtypes as w0..b1, the weights after all S steps

For MNIST's flagship model IN=784, H=128, C=10; any consistent sizes are accepted.

Model: Dense(H, relu) -> Dense(C, softmax), NO dropout, loss
SparseCategoricalCrossentropy, optimizer Keras Adam (lr 1e-3, beta_1 0.9,
beta_2 0.999, epsilon 1e-7), one update per step on the step's whole batch.

Loss (--loss, default "logits"): in TF2 Keras a Dense layer with a softmax
activation tags its output with the pre-softmax logits (`_keras_logits`; older
versions detect the Softmax op), and SparseCategoricalCrossentropy
(from_logits=False) then uses those logits: the loss is
sparse_softmax_cross_entropy_with_logits, i.e. -log_softmax(z)[y], with no
clipping. That is what model.fit computes, and it is the numerically stable
form, so it is the default here and lockstep should do the same. The other
mode, "clipped-probs", reproduces Keras' path for a bare probability tensor:
p = softmax(z); p = clip(p, 1e-7, 1 - 1e-7); loss = -log_softmax(log p)[y]
(Keras feeds log p to the same logits kernel, which renormalises).

Adam (Keras' update, not torch.optim.Adam, which adds epsilon to
sqrt(v_hat) rather than to sqrt(v)), with t = 1, 2, ...:
    alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)
    m += (g - m) * (1 - b1);  v += (g*g - v) * (1 - b2)
    w -= (m * alpha) / (sqrt(v) + eps)
in float32, with the constants rounded as Keras 3 rounds them: b1, b2, lr, eps
are float32(value); b1^t and b2^t are float32 powers of float32(b1), float32(b2);
but the coefficients (1 - b1) and (1 - b2) are float32(1 - b1 computed in
double), i.e. exactly 0.1f and 0.001f, NOT 1 - 0.999f (= 0.00099998713f).
Checked against TF 2.21 / Keras 3.15 (keras_crosscheck.py): with the naive
1 - 0.999f a saturated run (make_agreement_fixture.py --init-scale 6) drifts to
2e-2 from Keras in 50 steps; with Keras' rounding it stays within 3e-5.

Relative error of a result tensor a against a reference tensor b:
    rel(a, b) = max|a - b| / max(max|b|, tiny),   tiny = 1e-30
one number per tensor (the loss vector of all steps counts as one tensor); it
is scale-aware but does not blow up at individual near-zero elements.

The reference runs in float32 (the comparison that decides) and in float64
with the same float32-rounded constants (column "f32 floor": how far the
float32 reference itself is from near-exact arithmetic; a float32 lockstep
should land within a few times that floor; the floor may understate it because
both reference runs sum in the same order).

Exit codes: 0 all tensors within --rtol of the float32 reference, 1 some
tensor is not, 2 a missing or malformed input file (the message names it).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

TINY = 1e-30
PARAM_NAMES = ("w0", "b0", "w1", "b1")
LOSS_MODES = ("logits", "clipped-probs")


class InputError(Exception):
    """A missing or malformed input file; exit code 2."""


@dataclass
class AdamConfig:
    lr: float = 1e-3
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


# --------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------

def _torch():
    # Imported lazily so that --help and input errors work without torch.
    import torch

    return torch


def batch_loss(params, xb, yb, loss_mode: str, keras_eps: float = 1e-7):
    """Mean loss over the batch; params are leaf tensors w0, b0, w1, b1."""
    torch = _torch()
    w0, b0, w1, b1 = params
    h = torch.relu(xb @ w0 + b0)
    z = h @ w1 + b1
    if loss_mode == "logits":
        logp = torch.log_softmax(z, dim=1)
    elif loss_mode == "clipped-probs":
        p = torch.softmax(z, dim=1).clamp(keras_eps, 1.0 - keras_eps)
        logp = torch.log_softmax(torch.log(p), dim=1)
    else:
        raise ValueError(f"unknown loss mode {loss_mode!r}; use one of {LOSS_MODES}")
    return -logp.gather(1, yb.view(-1, 1)).mean()


def run_reference(init: dict, x: np.ndarray, y: np.ndarray, dtype: str = "float32",
                  loss_mode: str = "logits", adam: AdamConfig | None = None):
    """Trains from `init` for x.shape[0] steps; returns (losses (S,), final params dict).

    Results are numpy arrays in `dtype`.
    """
    torch = _torch()
    adam = adam or AdamConfig()
    tdt = {"float32": torch.float32, "float64": torch.float64}[dtype]
    params = [torch.tensor(np.asarray(init[n]), dtype=tdt).requires_grad_(True) for n in PARAM_NAMES]
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    # Rounding of the constants as Keras 3 does it (keras/src/optimizers/adam.py):
    # beta^t is computed in the variable's dtype from beta rounded to it, but the
    # coefficients 1 - beta are computed in double (Python floats) and only then
    # rounded. It matters: float32(1 - 0.999) = 0.001f, while
    # 1 - float32(0.999) = 0.00099998713f, 1.3e-5 apart, which in a badly
    # conditioned run (saturated softmax) grows to 1e-2 in the weights.
    # The float64 run uses the same float32-rounded constants, so that it
    # differs from the float32 run in arithmetic only.
    def const(c: float):
        return torch.tensor(float(np.float32(c)), dtype=tdt)

    lr = const(adam.lr)
    b1 = const(adam.beta_1)
    b2 = const(adam.beta_2)
    one_minus_b1 = const(1.0 - adam.beta_1)
    one_minus_b2 = const(1.0 - adam.beta_2)
    eps = const(adam.epsilon)
    one = torch.tensor(1.0, dtype=tdt)
    xs = torch.tensor(x, dtype=tdt)
    ys = torch.tensor(y.astype(np.int64))
    losses = []
    for step in range(xs.shape[0]):
        for p in params:
            p.grad = None
        loss = batch_loss(params, xs[step], ys[step], loss_mode, keras_eps=adam.epsilon)
        loss.backward()
        losses.append(loss.detach().clone())
        t = torch.tensor(float(step + 1), dtype=tdt)
        alpha = lr * torch.sqrt(one - b2 ** t) / (one - b1 ** t)
        with torch.no_grad():
            for p, m, v in zip(params, ms, vs):
                g = p.grad
                m.add_((g - m) * one_minus_b1)
                v.add_((g * g - v) * one_minus_b2)
                p.sub_((m * alpha) / (torch.sqrt(v) + eps))
    out = {n: p.detach().numpy().astype(dtype) for n, p in zip(PARAM_NAMES, params)}
    return torch.stack(losses).numpy().astype(dtype), out


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| / max(max|b|, TINY), computed in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    diff = np.abs(a - b)
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(diff.max() / max(float(np.abs(b).max()), TINY))


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max()) if a.size else 0.0


# --------------------------------------------------------------------------
# Input loading and validation
# --------------------------------------------------------------------------

def _load(directory: str, name: str) -> np.ndarray:
    path = os.path.join(directory, name + ".npy")
    if not os.path.isfile(path):
        raise InputError(f"missing input file: {path}")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any parse failure is a malformed file
        raise InputError(f"malformed input file {path}: cannot read as .npy ({e})") from e
    if not isinstance(arr, np.ndarray):
        raise InputError(f"malformed input file {path}: not a single array")
    return arr


def _expect(path_name: str, arr: np.ndarray, shape: tuple, dtypes: tuple[str, ...]) -> None:
    if arr.dtype.name not in dtypes:
        raise InputError(
            f"malformed input file {path_name}.npy: dtype {arr.dtype.name}, expected {' or '.join(dtypes)}")
    if tuple(arr.shape) != tuple(shape):
        raise InputError(
            f"malformed input file {path_name}.npy: shape {tuple(arr.shape)}, expected {tuple(shape)}")


def load_inputs(directory: str):
    """Returns (init, x, y, lockstep_loss, lockstep_params) after checking every shape and dtype."""
    if not os.path.isdir(directory):
        raise InputError(f"not a directory: {directory}")
    f32 = ("float32",)
    w0 = _load(directory, "w0")
    if w0.ndim != 2:
        raise InputError(f"malformed input file w0.npy: expected 2-D (in, hidden), got shape {w0.shape}")
    n_in, n_hidden = w0.shape
    w1 = _load(directory, "w1")
    if w1.ndim != 2:
        raise InputError(f"malformed input file w1.npy: expected 2-D (hidden, classes), got shape {w1.shape}")
    n_classes = w1.shape[1]
    shapes = {"w0": (n_in, n_hidden), "b0": (n_hidden,), "w1": (n_hidden, n_classes), "b1": (n_classes,)}
    init = {"w0": w0, "w1": w1, "b0": _load(directory, "b0"), "b1": _load(directory, "b1")}
    for n in PARAM_NAMES:
        _expect(n, init[n], shapes[n], f32)

    x = _load(directory, "x")
    if x.ndim != 3:
        raise InputError(f"malformed input file x.npy: expected 3-D (steps, batch, {n_in}), got shape {x.shape}")
    steps, batch = x.shape[0], x.shape[1]
    if steps < 1 or batch < 1:
        raise InputError(f"malformed input file x.npy: shape {x.shape} has no steps or an empty batch")
    _expect("x", x, (steps, batch, n_in), f32)
    y = _load(directory, "y")
    _expect("y", y, (steps, batch), ("int64", "int32"))
    if y.min() < 0 or y.max() >= n_classes:
        raise InputError(
            f"malformed input file y.npy: labels must lie in [0, {n_classes}), found [{y.min()}, {y.max()}]")
    if not np.all(np.isfinite(x)):
        raise InputError("malformed input file x.npy: contains NaN or Inf")
    for n in PARAM_NAMES:
        if not np.all(np.isfinite(init[n])):
            raise InputError(f"malformed input file {n}.npy: contains NaN or Inf")

    ls_loss = _load(directory, "lockstep_loss")
    _expect("lockstep_loss", ls_loss, (steps,), f32)
    ls_params = {}
    for n in PARAM_NAMES:
        ls_params[n] = _load(directory, "lockstep_" + n)
        _expect("lockstep_" + n, ls_params[n], shapes[n], f32)
    # NaN/Inf in lockstep's results is a disagreement (exit 1), not a malformed file.
    return init, x, y, ls_loss, ls_params


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Compare lockstep's loss and weights with a PyTorch reference (see module docstring).")
    ap.add_argument("dir", help="directory holding w0/b0/w1/b1/x/y.npy and lockstep_*.npy")
    ap.add_argument("--rtol", type=float, default=1e-4,
                    help="max allowed relative error per tensor vs the float32 reference (default 1e-4)")
    ap.add_argument("--loss", choices=LOSS_MODES, default="logits",
                    help="how the softmax cross-entropy is computed (default: logits, as Keras fit does)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta-1", type=float, default=0.9)
    ap.add_argument("--beta-2", type=float, default=0.999)
    ap.add_argument("--epsilon", type=float, default=1e-7)
    ap.add_argument("--no-float64", action="store_true", help="skip the float64 run (error floor column)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args(argv)

    try:
        init, x, y, ls_loss, ls_params = load_inputs(args.dir)
    except InputError as e:
        print(f"torch_agreement: error: {e}", file=sys.stderr)
        return 2

    torch = _torch()
    torch.set_num_threads(max(1, args.threads))
    adam = AdamConfig(args.lr, args.beta_1, args.beta_2, args.epsilon)
    steps, batch, n_in = x.shape
    print(f"torch_agreement: {steps} steps, batch {batch}, Dense({init['w0'].shape[1]}, relu, input {n_in}) -> "
          f"Dense({init['w1'].shape[1]}, softmax), loss={args.loss}, Adam(lr={adam.lr}, b1={adam.beta_1}, "
          f"b2={adam.beta_2}, eps={adam.epsilon}), rtol={args.rtol:g}")

    ref32_loss, ref32 = run_reference(init, x, y, "float32", args.loss, adam)
    ref64_loss, ref64 = (None, None)
    if not args.no_float64:
        ref64_loss, ref64 = run_reference(init, x, y, "float64", args.loss, adam)

    rows = [("loss", ls_loss, ref32_loss, ref64_loss)]
    rows += [(n, ls_params[n], ref32[n], ref64[n] if ref64 else None) for n in PARAM_NAMES]

    hdr = f"{'tensor':8s} {'shape':>14s} {'max|ls-ref32|':>14s} {'rel vs ref32':>13s}"
    if ref64:
        hdr += f" {'rel vs ref64':>13s} {'f32 floor':>11s}"
    hdr += "  result"
    print(hdr)
    print("-" * len(hdr))
    ok_all = True
    for name, got, r32, r64 in rows:
        e32 = rel_err(got, r32)
        ok = bool(np.isfinite(e32) and e32 <= args.rtol)
        ok_all &= ok
        line = f"{name:8s} {str(tuple(got.shape)):>14s} {max_abs(got, r32):14.3e} {e32:13.3e}"
        if r64 is not None:
            line += f" {rel_err(got, r64):13.3e} {rel_err(r32, r64):11.3e}"
        line += "  " + ("ok" if ok else "FAIL")
        print(line)
    print(f"final loss: lockstep {float(ls_loss[-1]):.6f}, reference {float(ref32_loss[-1]):.6f}")
    if ref64:
        print("(f32 floor = rel. error of the float32 reference against the float64 one)")
    print("AGREE" if ok_all else f"DISAGREE: some tensor's relative error exceeds rtol={args.rtol:g}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
