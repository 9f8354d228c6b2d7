#!/usr/bin/env python3
"""Speed reference: trains lockstep's flagship MLP with PyTorch, TF/Keras and/or libtorch (C++).

Model: Dense(128, relu, input 784) -> Dropout(0.2) -> Dense(10, softmax),
Adam(1e-3, eps 1e-7), sparse categorical cross-entropy, batch 64, MNIST pixels
scaled to [0, 1] and flattened to 784.

    python3 bench/reference_mlp.py [--framework torch|tf|libtorch|both|all] [--threads 1] [--steps 2000]
                                   [--warmup-frac 0.05] [--batch 64] [--hidden 128] [--json]

--batch and --hidden change the batch size and the hidden layer's width (the
wide MLP of bench/compare_cores.sh -H: hidden 1024 or 4096, batch 256).

Each framework's throughput is steps/second over the steps after the first
warm-up fraction (default 5%). Each gets its best thread settings: PyTorch runs
once with its own threads and once with OpenBLAS' (torch_pools), TF once with
its default threads and once with intra-op = threads, inter-op = 1; the faster
of each counts. With --json the last stdout line is
{"torch": steps_per_second, "tf": steps_per_second[, "libtorch": ...]}; a framework that could not
run is null there, the reason goes to stderr, and the exit code is 3.

libtorch is PyTorch's C++ API (Debian's libtorch-dev, the same 1.13 build): the
same model in a C++ loop, bench/reference_libtorch.cpp, which this script builds
with g++ into build/bench-ref on first use.

Interpreters: PyTorch is Debian's python3-torch (/usr/bin/python3, or
.venv-ref, which sees system site packages); TensorFlow lives only in .venv-ref
(scripts/setup_python.sh). Every framework runs in a child process of its own
(so thread settings never leak between them), started with this interpreter if
it can import the framework, otherwise with the other of the two.

Data: the IDX gzip files train-images-idx3-ubyte.gz / train-labels-idx1-ubyte.gz
from the first of $LOCKSTEP_DATA_DIR/mnist, $HOME/.lockstep/datasets/mnist,
<repo>/../shared/data/mnist, /work/shared/data/mnist that has them; random data
of the same shape (with a warning) if none has.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAMEWORKS = ("torch", "tf")
MODULE = {"torch": "torch", "tf": "tensorflow"}
BATCH = 64
HIDDEN = 128


def log(msg: str) -> None:
    print(f"[reference_mlp] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def mnist_dirs() -> list[str]:
    dirs = []
    if os.environ.get("LOCKSTEP_DATA_DIR"):
        dirs.append(os.path.join(os.environ["LOCKSTEP_DATA_DIR"], "mnist"))
    dirs.append(os.path.join(os.path.expanduser("~"), ".lockstep", "datasets", "mnist"))
    dirs.append(os.path.normpath(os.path.join(REPO, "..", "shared", "data", "mnist")))
    dirs.append("/work/shared/data/mnist")
    return dirs


def read_idx(path: str):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {arr.size} bytes of data, header says {dims}")
    return arr.reshape(dims)


def load_mnist_train():
    """Returns (x (60000, 784) float32 in [0, 1], y (60000,) int64, source)."""
    import numpy as np

    for d in mnist_dirs():
        xi = os.path.join(d, "train-images-idx3-ubyte.gz")
        yi = os.path.join(d, "train-labels-idx1-ubyte.gz")
        if os.path.isfile(xi) and os.path.isfile(yi):
            x = read_idx(xi).reshape(-1, 784).astype(np.float32) / np.float32(255.0)
            y = read_idx(yi).astype(np.int64)
            return x, y, d
    log("WARNING: MNIST not found in " + ", ".join(mnist_dirs()) + "; using random data of MNIST's shape")
    rng = np.random.default_rng(0)
    return rng.random((60000, 784), dtype=np.float32), rng.integers(0, 10, 60000, dtype=np.int64), "random"


def keras_fit_timed(keras, model, ds, steps: int):
    """model.fit over `steps` batches of ds: (its History, each step's end time)."""

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    timer = StepTimer()
    hist = model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=[timer])
    if len(timer.times) != steps:
        raise RuntimeError(f"timer saw {len(timer.times)} batches, expected {steps}")
    return hist, timer.times


def measure(times: list[float], warmup_frac: float) -> float:
    """steps/s from per-step end times, after dropping the first warmup_frac of steps."""
    n = len(times)
    w = min(max(1, int(round(n * warmup_frac))), n - 2)
    return (n - 1 - w) / (times[-1] - times[w])


# ---------------------------------------------------------------------------
# The two frameworks (each runs in its own process)
# ---------------------------------------------------------------------------

def run_torch(steps: int, threads: int, warmup_frac: float) -> float:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    x_np, y_np, src = load_mnist_train()
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(HIDDEN, 10))
    # Keras' Dense: glorot-uniform kernel, zero bias (speed does not depend on
    # it, but the loss printed below is then comparable with Keras').
    for m in model:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    # Logits + cross_entropy is how softmax + SparseCategoricalCrossentropy is
    # written idiomatically (and what Keras computes, see tests/reference).
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    n = x.shape[0]
    perm = torch.randperm(n)
    xs, ys = x[perm].contiguous(), y[perm].contiguous()
    pos = 0
    times = []
    loss = None
    for _ in range(steps):
        if pos + BATCH > n:  # new epoch: reshuffle once, outside the step
            perm = torch.randperm(n)
            xs, ys = x[perm].contiguous(), y[perm].contiguous()
            pos = 0
        xb, yb = xs[pos:pos + BATCH], ys[pos:pos + BATCH]
        pos += BATCH
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        times.append(time.perf_counter())
    sps = measure(times, warmup_frac)
    log(f"torch {torch.__version__} (BLAS: {blas_in_use()}): {steps} steps, {threads} thread(s), data={src}, "
        f"last loss {float(loss):.4f}, {sps:.1f} steps/s")
    return sps


def run_tf(steps: int, threads: int, warmup_frac: float, tf_threads: str = "tuned") -> float:
    """tf_threads "tuned": intra-op = threads, inter-op = 1; "default": TF's own choice."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if tf_threads == "tuned":  # before any op runs: afterwards TF refuses to change them
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    keras.utils.set_random_seed(0)
    x, y, src = load_mnist_train()
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=0)
          .batch(BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE))

    hist, times = keras_fit_timed(keras, model, ds, steps)
    sps = measure(times, warmup_frac)
    setting = f"{threads} intra-op / 1 inter-op thread(s)" if tf_threads == "tuned" else "TF's default threads"
    log(f"tensorflow {tf.__version__} (keras {keras.__version__}): {steps} steps, {setting}, "
        f"data={src}, loss {hist.history['loss'][-1]:.4f}, acc {hist.history['accuracy'][-1]:.4f}, "
        f"{sps:.1f} steps/s")
    return sps


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def can_import(python: str, module: str) -> bool:
    if not os.path.isfile(python):
        return False
    code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{module}') is None)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def pick_python(framework: str) -> str | None:
    candidates = [sys.executable, "/usr/bin/python3", os.path.join(REPO, ".venv-ref", "bin", "python")]
    if framework == "tf":
        candidates = [sys.executable, os.path.join(REPO, ".venv-ref", "bin", "python")]
    for py in dict.fromkeys(candidates):
        if can_import(py, MODULE[framework]):
            return py
    return None


def run_measurement(framework: str, cmd: list, env: dict) -> float | None:
    """Runs a child measurement whose last stdout line is its steps/s; None (logged) on failure."""
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        log(f"{framework}: FAILED (exit {proc.returncode}) running {' '.join(cmd)}")
        return None
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        log(f"{framework}: FAILED: unexpected output {proc.stdout!r}")
        return None


LIBTORCH_SRC = os.path.join(REPO, "bench", "reference_libtorch.cpp")
LIBTORCH_INCLUDE = "/usr/include/torch/csrc/api/include"


def libtorch_binary() -> str | None:
    """bench/reference_libtorch.cpp built against Debian's libtorch-dev into build/bench-ref (again
    when the source is newer); None, logged, when libtorch-dev is missing or the build fails."""
    if not os.path.isfile(os.path.join(LIBTORCH_INCLUDE, "torch", "torch.h")):
        log("libtorch: UNAVAILABLE: no libtorch headers (apt-get install libtorch-dev)")
        return None
    out = os.path.join(REPO, "build", "bench-ref", "reference_libtorch")
    if os.path.isfile(out) and os.path.getmtime(out) >= os.path.getmtime(LIBTORCH_SRC):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = ["g++", "-std=c++17", "-O2", "-DNDEBUG", f"-I{LIBTORCH_INCLUDE}", LIBTORCH_SRC, "-o", out,
           "-ltorch", "-ltorch_cpu", "-lc10", "-lz"]
    log("libtorch: building " + " ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        log("libtorch: UNAVAILABLE: building bench/reference_libtorch.cpp failed")
        return None
    return out


def run_libtorch(args) -> float | None:
    binary = libtorch_binary()
    data = next((d for d in mnist_dirs() if os.path.isfile(os.path.join(d, "train-images-idx3-ubyte.gz"))), None)
    if binary is None or data is None:
        if data is None:
            log("libtorch: UNAVAILABLE: no MNIST train files in " + ", ".join(mnist_dirs()))
        return None
    cmd = [binary, "--data", data, "--threads", str(args.threads), "--steps", str(args.steps),
           "--warmup-frac", str(args.warmup_frac), "--batch", str(args.batch), "--hidden", str(args.hidden)]
    return run_torch_best_pool(cmd, args.threads, "libtorch")


def run_child(framework: str, args) -> float | None:
    if framework == "libtorch":
        return run_libtorch(args)
    py = pick_python(framework)
    if py is None:
        hint = ("apt-get install python3-torch" if framework == "torch"
                else "run scripts/setup_python.sh to create .venv-ref with tensorflow-cpu")
        log(f"{framework}: UNAVAILABLE: module '{MODULE[framework]}' not importable by {sys.executable}"
            f"{'' if framework == 'tf' else ', /usr/bin/python3'} or .venv-ref ({hint})")
        return None
    t = str(args.threads)
    cmd = [py, os.path.abspath(__file__), "--child", framework, "--threads", t, "--steps", str(args.steps),
           "--warmup-frac", str(args.warmup_frac), "--batch", str(args.batch), "--hidden", str(args.hidden)]
    if framework == "torch":
        return run_torch_best_pool(cmd, args.threads)
    return run_tf_both_threadings(cmd, args.threads)


def without_blas_pins(env: dict) -> dict:
    """`env` without the variables that pin OpenBLAS to older kernels on the project's machines:
    the reference gets its best."""
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    return env


def blas_in_use() -> str:
    """The BLAS libraries this process has loaded, and OpenBLAS's kernel (core) where it is one."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "blas" in os.path.basename(parts[-1]):
                libs.add(parts[-1])
    desc = ", ".join(sorted(libs)) or "no BLAS library loaded"
    for path in sorted(libs):
        try:
            corename = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        corename.restype = ctypes.c_char_p
        return f"{desc}; {os.path.basename(path)} runs OpenBLAS kernel {corename().decode()}"
    return desc


def child_env(threads: int) -> dict:
    """The environment of a measurement child: every thread pool sized to `threads`."""
    env = without_blas_pins(dict(os.environ))
    t = str(threads)
    env.update(OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, TF_NUM_INTRAOP_THREADS=t,
               TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    return env


def torch_pools(threads: int) -> list[tuple[str, int, int]]:
    """PyTorch's CPU thread settings to try, as (label, torch threads, OpenBLAS threads).

    Debian's torch 1.13 has two pools: its own OpenMP threads (elementwise ops, reductions,
    torch.set_num_threads) and OpenBLAS' pthreads (every matmul). Each spins a while after its
    work, so with both at `threads` on `threads` cores they take the cores from each other: the
    flagship MLP at 2 threads ran 260 steps/s that way and 720-840 with either pool alone (AMD
    EPYC VM, 2026-12-07). So each pool gets the cores in turn and the faster is the reference."""
    if threads == 1:
        return [("1 thread", 1, 1)]
    return [(f"torch {threads} threads + OpenBLAS 1", threads, 1),
            (f"torch 1 thread + OpenBLAS {threads}", 1, threads)]


def run_torch_best_pool(cmd: list, threads: int, name: str = "torch") -> float | None:
    """Runs the PyTorch measurement `cmd` (which holds "--threads N"; Python's torch or the libtorch
    program) once per torch_pools(threads) setting; returns the faster, logging each."""
    at = cmd.index("--threads") + 1
    results = {}
    for label, torch_threads, blas_threads in torch_pools(threads):
        env = child_env(threads)
        env.update(OMP_NUM_THREADS=str(torch_threads), MKL_NUM_THREADS=str(torch_threads),
                   OPENBLAS_NUM_THREADS=str(blas_threads))
        run = list(cmd)
        run[at] = str(torch_threads)
        results[label] = run_measurement(name, run, env)
    ran = {k: v for k, v in results.items() if v is not None}
    if len(results) > 1:
        log(f"{name}: " + ", ".join(f"{k}: {'failed' if v is None else f'{v:.2f}'}" for k, v in results.items())
            + " steps/s; keeping the faster")
    return max(ran.values()) if ran else None


def run_tf_both_threadings(cmd: list, threads: int) -> float | None:
    """TF: its default thread settings and the tuned ones (intra-op = threads, inter-op = 1), one
    after the other (the child takes --tf-threads); the faster is the reference."""
    tuned = run_measurement("tf", cmd + ["--tf-threads", "tuned"], child_env(threads))
    env = child_env(threads)
    for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        env.pop(k, None)
    default = run_measurement("tf", cmd + ["--tf-threads", "default"], env)
    got = [v for v in (tuned, default) if v is not None]
    if got:
        log(f"tf: tuned threads {tuned}, default threads {default} steps/s; keeping the faster")
    return max(got) if got else None


def main(argv=None) -> int:
    global BATCH, HIDDEN
    ap = argparse.ArgumentParser(description="PyTorch / TF-Keras speed reference for lockstep's flagship MLP.")
    ap.add_argument("--framework", choices=("torch", "tf", "libtorch", "both", "all"), default="both",
                    help="both: torch and tf; all: torch, tf and libtorch (C++)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per framework (default 1)")
    ap.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    ap.add_argument("--warmup-frac", type=float, default=0.05, help="fraction of steps not timed (default 0.05)")
    ap.add_argument("--batch", type=int, default=BATCH, help=f"batch size (default {BATCH})")
    ap.add_argument("--hidden", type=int, default=HIDDEN, help=f"units of the hidden layer (default {HIDDEN})")
    ap.add_argument("--json", action="store_true", help="print {framework: steps_per_second} as the last line")
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--tf-threads", choices=("tuned", "default"), default="tuned", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 20:
        ap.error("--steps must be at least 20")
    if not 0.0 <= args.warmup_frac < 0.9:
        ap.error("--warmup-frac must be in [0, 0.9)")
    if args.batch < 1 or args.hidden < 1:
        ap.error("--batch and --hidden must be positive")
    BATCH, HIDDEN = args.batch, args.hidden

    if args.child:  # in-process run; prints only the number
        if args.child == "torch":
            print(run_torch(args.steps, max(1, args.threads), args.warmup_frac))
        else:
            print(run_tf(args.steps, max(1, args.threads), args.warmup_frac, args.tf_threads))
        return 0

    wanted = {"both": FRAMEWORKS, "all": FRAMEWORKS + ("libtorch",)}.get(args.framework, (args.framework,))
    results = {fw: run_child(fw, args) for fw in wanted}
    if args.json:
        print(json.dumps(results))
    else:
        for fw, sps in results.items():
            print(f"{fw:8s} {'unavailable' if sps is None else f'{sps:.1f} steps/s'}  "
                  f"(batch {BATCH}, {args.threads} thread(s), {args.steps} steps)")
    return 0 if all(v is not None for v in results.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
