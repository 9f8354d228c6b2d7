#!/usr/bin/env python3
"""GPU speed reference for issue 13: the flagship MLP and Keras' MNIST convnet in PyTorch on cuda:0,
eager and torch.compile, on the same models, batches and optimizer as bench/gpu_bench.cpp.

MLP: Linear(784, 128) -> ReLU -> Dropout(0.2) -> Linear(128, 10), cross-entropy on the logits
(what Dense(10, softmax) + sparse categorical cross-entropy compute), Adam(1e-3, eps 1e-7),
batches 64 and 1024. Convnet: Conv2d(1, 32, 3) -> ReLU -> MaxPool(2) -> Conv2d(32, 64, 3) -> ReLU ->
MaxPool(2) -> Flatten -> Dropout(0.5) -> Linear(1600, 10), batch 128, NCHW. Eight batches of random
MNIST-shaped data live on the GPU (as gpu_bench's do); every step reads the loss (loss.item(), as
lockstep's fit reads it), so a step ends with a device synchronisation in both.

    python3 bench/reference_gpu.py [--quick] [--json] [--budget SECONDS]

With --json each part prints one JSON object of the figures so far ({"mlp_b64_eager": steps/s, ...});
the last stdout line holds them all. An entry that could not run (torch.compile without a working
compiler toolchain, say, or past --budget) is null with the reason on stderr. Exit 77 when there is no CUDA device, 3 when torch is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def log(msg: str) -> None:
    print(f"[reference_gpu] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds after which torch.compile runs not yet started are skipped")
    args = ap.parse_args()
    try:
        import torch
        from torch import nn
    except ImportError as e:
        log(f"no torch: {e}")
        return 3
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 77
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False  # lockstep's float32 GEMM is float32
    torch.backends.cudnn.allow_tf32 = False
    log(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    def mlp():
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))

    def convnet():
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.5), nn.Linear(1600, 10))

    # PyTorch's configurations, each given its best: eager with Adam's default (foreach) and its
    # fused CUDA kernel; torch.compile of the whole step in its default mode and in
    # "reduce-overhead" (CUDA graphs: the launch overhead that dominates such small steps goes).
    # The faster of each pair is the reference.
    eager_configs = ("foreach", "fused")
    compile_configs = ("default", "reduce-overhead")

    def steps_per_second(make, shape, batch: int, config: str, steps: int) -> float:
        torch.manual_seed(1)
        model = make().to(dev)
        compiled = config in compile_configs
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, fused=config == "fused" or None)
        loss_fn = nn.CrossEntropyLoss()
        xs = [torch.rand((batch, *shape), device=dev) for _ in range(8)]
        ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(8)]

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        fn = (torch.compile(step, mode=None if config == "default" else config) if compiled else step)
        for i in range(30 if not compiled else 60):  # compiled: compilation and recompiles first
            fn(xs[i % 8], ys[i % 8]).item()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            fn(xs[i % 8], ys[i % 8]).item()
        torch.cuda.synchronize()
        return steps / (time.perf_counter() - t0)

    runs = [("mlp_b64", mlp, (784,), 64, 1000), ("mlp_b1024", mlp, (784,), 1024, 400),
            ("convnet_b128", convnet, (1, 28, 28), 128, 300)]
    out: dict[str, float | str | None] = {}
    t_start = time.perf_counter()

    def emit() -> None:  # the figures so far, one JSON line each time (the last line holds them all)
        if args.json:
            print(json.dumps(out), flush=True)

    def run(name, make, shape, batch, steps, compiled):
        kind = "compile" if compiled else "eager"
        key = f"{name}_{kind}"
        if args.quick:
            steps //= 5
        for config in compile_configs if compiled else eager_configs:
            label = f"{key} ({config})"
            if compiled and time.perf_counter() - t_start > args.budget:
                log(f"{label}: skipped: past the {args.budget:.0f} s budget")
                continue
            try:
                sps = steps_per_second(make, shape, batch, config, steps)
                log(f"{label}: {sps:.1f} steps/s")
            except Exception as e:  # torch.compile needs a C compiler and triton; report, go on
                log(f"{label}: could not run: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            out[f"{key}_{config}"] = sps
            if sps > (out.get(key) or 0):
                out[key], out[f"{key}_config"] = sps, config
        out.setdefault(key, None)
        emit()

    # Eager first, then cuBLAS's GEMM peak, then torch.compile (whose compilation takes longest):
    # a run cut off by a time limit keeps what came before.
    for r in runs:
        run(*r, compiled=False)
    # The chip's float32 and bfloat16 GEMM peak as PyTorch (cuBLAS) reaches it, for comparison.
    for dtype, label in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        a = torch.rand((8192, 8192), device=dev, dtype=dtype)
        b = torch.rand((8192, 8192), device=dev, dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        iters = 5 if args.quick else 20
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        out[f"torch_gemm_{label}_8192_tflops"] = 2 * 8192**3 * iters / (time.perf_counter() - t0) / 1e12
    emit()
    for r in runs:
        run(*r, compiled=True)
    if not args.json:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
