#!/usr/bin/env python3
"""Distributed speed reference: the flagship MLP under TF MirroredStrategy and PyTorch DDP.

Model (as bench/reference_mlp.py): Dense(128, relu, input 784) -> Dropout(0.2)
-> Dense(10, softmax), Adam(1e-3, eps 1e-7), sparse categorical cross-entropy,
MNIST pixels scaled to [0, 1]. Global batch G (default 128) split evenly over
R replicas (default 2), all on this machine's CPUs.

    python3 bench/reference_distributed.py [--framework tf|torch|both] [--steps 2000]
        [--replicas 2] [--global-batch-size 128] [--warmup-frac 0.05]
        [--tf-intra-op 1] [--tf-inter-op R] [--json]

  tf:    tf.distribute.MirroredStrategy over R logical CPU devices (one physical
         CPU split with tf.config.set_logical_device_configuration before TF
         initialises), model built and compiled under strategy.scope(),
         model.fit on a tf.data dataset batched at G (the strategy splits it into
         G/R per replica); a Keras callback records the end time of every step.
         Threads: TF's logical CPU devices share ONE process-wide intra-op
         (Eigen) pool, so "intra-op 1 per device" cannot be set per device.
         With --tf-intra-op 1 each kernel runs single-threaded on the inter-op
         thread that launched it, and --tf-inter-op R (default) lets the R
         replicas' kernels run at the same time, one core each -- the closest
         TF equivalent of one thread per replica.
  torch: torch.nn.parallel.DistributedDataParallel, backend gloo, R processes
         started by torch.multiprocessing.spawn, rendezvous tcp://127.0.0.1:PORT
         (a free loopback port; GLOO_SOCKET_IFNAME=lo), torch.set_num_threads(1)
         and OMP/OPENBLAS/MKL_NUM_THREADS=1 per process; each rank trains on its
         G/R slice of the same shuffled global batch (what DistributedSampler
         does). Ranks synchronise (barrier) before the first step; rank 0 times.

Throughput is global steps per second over the steps after the first
warm-up fraction (default 5%); examples/s = steps/s x G. With --json the last
stdout line is {"tf": steps_per_second|null, "torch": ...}; a framework that
could not run is null there, the reason goes to stderr, and the exit code is 3.

Interpreters are picked as in reference_mlp.py (torch: the apt python3-torch
under /usr/bin/python3; tf: .venv-ref from scripts/setup_python.sh), and each
framework runs in a child process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_mlp import (keras_fit_timed, load_mnist_train, measure, pick_python, run_measurement,  # noqa: E402
                           MODULE, blas_in_use, without_blas_pins)

FRAMEWORKS = ("tf", "torch")


def log(msg: str) -> None:
    print(f"[reference_distributed] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# TensorFlow MirroredStrategy
# ---------------------------------------------------------------------------

def run_tf(args) -> float:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    # All of this must happen before TF initialises its runtime (first op,
    # first list_logical_devices): afterwards TF refuses to change it.
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(args.replicas)])
    tf.config.threading.set_intra_op_parallelism_threads(args.tf_intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(args.tf_inter_op)

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) != args.replicas:
        raise RuntimeError(f"asked for {args.replicas} logical CPU devices, TF made {devices}")
    strategy = tf.distribute.MirroredStrategy(devices)
    if strategy.num_replicas_in_sync != args.replicas:
        raise RuntimeError(f"MirroredStrategy has {strategy.num_replicas_in_sync} replicas")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    x, y, src = load_mnist_train()
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(784,)),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(10, activation="softmax"),
        ])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=0)
          .batch(args.global_batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE))

    hist, times = keras_fit_timed(keras, model, ds, args.steps)
    sps = measure(times, args.warmup_frac)
    xdo = type(strategy.extended._cross_device_ops).__name__ if getattr(
        strategy.extended, "_cross_device_ops", None) is not None else "default"
    log(f"tensorflow {tf.__version__} (keras {keras.__version__}) MirroredStrategy on {devices} "
        f"(cross-device ops {xdo}), intra-op {args.tf_intra_op}, inter-op {args.tf_inter_op}: "
        f"{args.steps} steps at global batch {args.global_batch_size}, data={src}, "
        f"loss {hist.history['loss'][-1]:.4f}, acc {hist.history['accuracy'][-1]:.4f}, {sps:.1f} steps/s")
    return sps


# ---------------------------------------------------------------------------
# PyTorch DistributedDataParallel (gloo)
# ---------------------------------------------------------------------------

def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_worker(rank: int, args, port: int, out_file: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    world = args.replicas
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        x_np, y_np, src = load_mnist_train()
        x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
        model = torch.nn.Sequential(
            torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(128, 10))
        for m in model:  # Keras' Dense initialisation: glorot-uniform kernel, zero bias
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                torch.nn.init.zeros_(m.bias)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        # Logits + cross_entropy == softmax + SparseCategoricalCrossentropy (see tests/reference).
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3, eps=1e-7)
        loss_fn = torch.nn.CrossEntropyLoss()
        ddp.train()
        gb = args.global_batch_size
        lb = gb // world
        n = x.shape[0]
        gen = torch.Generator().manual_seed(1)  # same permutation on every rank

        def shuffled():
            perm = torch.randperm(n, generator=gen)
            return x[perm].contiguous(), y[perm].contiguous()

        xs, ys = shuffled()
        pos = 0
        times = []
        loss = None
        dist.barrier()
        for _ in range(args.steps):
            if pos + gb > n:  # new epoch: reshuffle once, outside the step
                xs, ys = shuffled()
                pos = 0
            lo = pos + rank * lb
            xb, yb = xs[lo:lo + lb], ys[lo:lo + lb]
            pos += gb
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb), yb)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            times.append(time.perf_counter())
        dist.barrier()
        if rank == 0:
            sps = measure(times, args.warmup_frac)
            log(f"torch {torch.__version__} DDP gloo (BLAS: {blas_in_use()}), {world} processes x 1 thread, "
                f"{args.steps} steps at global batch {gb} ({lb}/process), data={src}, "
                f"rank-0 last loss {float(loss):.4f}, {sps:.1f} steps/s")
            with open(out_file, "w") as f:
                f.write(repr(sps))
    finally:
        dist.destroy_process_group()


def run_torch(args) -> float:
    import torch.multiprocessing as mp

    # Inherited by the spawned ranks (they start fresh interpreters).
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = "1"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    port = free_loopback_port()
    os.environ["MASTER_PORT"] = str(port)
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "sps")
        mp.spawn(torch_worker, args=(args, port, out_file), nprocs=args.replicas, join=True)
        with open(out_file) as f:
            return float(f.read())


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def run_child(framework: str, args) -> float | None:
    py = pick_python(framework)
    if py is None:
        hint = ("apt-get install python3-torch" if framework == "torch"
                else "run scripts/setup_python.sh to create .venv-ref with tensorflow-cpu")
        log(f"{framework}: UNAVAILABLE: module '{MODULE[framework]}' not importable ({hint})")
        return None
    if framework == "torch":
        code = "import sys, torch.distributed as d; sys.exit(0 if d.is_available() and d.is_gloo_available() else 1)"
        if subprocess.run([py, "-c", code], capture_output=True).returncode != 0:
            log(f"torch: UNAVAILABLE: {py}'s torch has no torch.distributed with the gloo backend")
            return None
    env = without_blas_pins(dict(os.environ))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if framework == "tf":
        env.pop("TF_NUM_INTRAOP_THREADS", None)
        env.pop("TF_NUM_INTEROP_THREADS", None)
        env.update(OMP_NUM_THREADS=str(args.tf_intra_op), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [py, os.path.abspath(__file__), "--child", framework, "--steps", str(args.steps),
           "--replicas", str(args.replicas), "--global-batch-size", str(args.global_batch_size),
           "--warmup-frac", str(args.warmup_frac), "--tf-intra-op", str(args.tf_intra_op),
           "--tf-inter-op", str(args.tf_inter_op)]
    return run_measurement(framework, cmd, env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="TF MirroredStrategy / torch DDP speed reference for the flagship MLP.")
    ap.add_argument("--framework", choices=("tf", "torch", "both"), default="both")
    ap.add_argument("--steps", type=int, default=2000, help="global training steps (default 2000)")
    ap.add_argument("--replicas", type=int, default=2, help="replicas / processes (default 2)")
    ap.add_argument("--global-batch-size", type=int, default=128, help="global batch (default 128)")
    ap.add_argument("--warmup-frac", type=float, default=0.05, help="fraction of steps not timed (default 0.05)")
    ap.add_argument("--tf-intra-op", type=int, default=1, help="TF intra-op threads, process-wide (default 1)")
    ap.add_argument("--tf-inter-op", type=int, default=None, help="TF inter-op threads (default: replicas)")
    ap.add_argument("--json", action="store_true", help="print {framework: steps_per_second} as the last line")
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tf_inter_op is None:
        args.tf_inter_op = args.replicas
    if args.steps < 20:
        ap.error("--steps must be at least 20")
    if args.replicas < 1 or args.global_batch_size % args.replicas != 0:
        ap.error("--global-batch-size must be a positive multiple of --replicas")
    if not 0.0 <= args.warmup_frac < 0.9:
        ap.error("--warmup-frac must be in [0, 0.9)")

    if args.child:  # in-process run; prints only the number
        fn = run_tf if args.child == "tf" else run_torch
        print(fn(args))
        return 0

    wanted = FRAMEWORKS if args.framework == "both" else (args.framework,)
    results = {fw: run_child(fw, args) for fw in wanted}  # one after another, never concurrently
    if args.json:
        print(json.dumps(results))
    else:
        for fw, sps in results.items():
            print(f"{fw:6s} " + ("unavailable" if sps is None else
                                 f"{sps:.1f} steps/s, {sps * args.global_batch_size:.0f} examples/s") +
                  f"  ({args.replicas} replicas, global batch {args.global_batch_size}, {args.steps} steps)")
    return 0 if all(v is not None for v in results.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
