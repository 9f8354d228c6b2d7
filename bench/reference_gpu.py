#!/usr/bin/env python3
"""GPU speed reference (issues 13, 37, 40): PyTorch on cuda:0 at its best, on the models, batches and
optimizer of bench/gpu_bench.cpp and of `lockstep train` on a GPU. Every configuration below runs
(within --budget and --cap); the fastest is the row's reference (issue 37: "the best of all PyTorch
configurations").

Rows (Adam(1e-3, eps 1e-7), cross-entropy on the logits, float32 with TF32 off as lockstep's):
  mlp_b64, mlp_b1024   the flagship: Linear(784, 128) -> ReLU -> Dropout(0.2) -> Linear(128, 10)
  convnet_b128         Keras' MNIST convnet: Conv2d(1, 32, 3) -> ReLU -> MaxPool(2) -> Conv2d(32, 64, 3)
                       -> ReLU -> MaxPool(2) -> Flatten -> Dropout(0.5) -> Linear(1600, 10), NCHW
    (bare steps, against gpu_bench: 8 batches of random data live on the GPU)
  wide_b4096_{f32,bf16,f16}  the wide MLP (hidden 4096), global batch 4096: float32, bfloat16
                       autocast, float16 autocast + GradScaler
  vit_b128, gpt_b64    the ViT and the character GPT of bench/reference_transformer.py (its default
                       sizes, compare_transformer.sh's), float32
    (against `lockstep train`: like a user's DataLoader(pin_memory=True) loop, each batch is copied
    from pinned host memory with non_blocking=True; images travel as uint8 pixels (4x fewer bytes
    than the float32 a ToTensor transform gives) and are scaled to [0, 1] on the GPU; GPT's
    characters as int64 ids. 8 batches of random data of MNIST's / the text's shape, reused.)

Configurations (each row runs those it can; one that fails is logged, skipped and named in
"skipped"):
  eager_foreach, eager_fused   eager with Adam's default (foreach) and its fused CUDA kernel
  graph                        the whole step (forward, backward, optimizer) captured by hand in one
                               CUDA graph (torch.cuda.graph, static input and target tensors,
                               Adam(fused=True, capturable=True), warm-up on a side stream as PyTorch's
                               documentation shows) and replayed; the next batch copied into the
                               static input first
  compile_default, compile_reduce-overhead   torch.compile of the whole step (the latter uses CUDA graphs)
  *_async (the host-fed rows)  eager_fused and graph with the loss read only at the end, not after
                               every step (what a loop that logs rarely does)
Every other configuration reads the loss after each step (loss.item(), as lockstep's train_step and
fit read it), so a step ends with a device synchronisation in both.

    python3 bench/reference_gpu.py [--quick] [--json] [--budget SECONDS] [--cap SECONDS]
                                   [--rows mlp,wide,...] [--text FILE] [--dry-run]

Each configuration is timed over at least STEADY_SECONDS (and its row's minimum of steps) after its
warm-up. With --json each row prints one JSON object of the figures so far: "ROW_CONFIG": steps/s
for each configuration, "ROW": the best, "ROW_config": which one, "skipped": "ROW (CONFIG): why"
for each configuration that did not run or failed; the last stdout line holds them all.
Issue 37's reference rows (REFERENCE_ROWS) run first, then the others; within each, torch.compile
comes last (compilation takes longest), row by row in order of value, default before
reduce-overhead (skipped where default failed: the same compiler). Time: nothing starts past
--budget seconds from the start, and each configuration is stopped after --cap seconds (compile's
time included) or at the budget, whichever comes first, and recorded as skipped.
--dry-run: no GPU needed: builds every row's model on the CPU and runs its eager step twice on a
small batch, and stops one that runs past a cap (CI's check that the script and its helpers work;
the figures mean nothing).
Exit 77 when there is no CUDA device, 3 when torch is missing, 1 if a dry run's step failed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EAGER = ("eager_foreach", "eager_fused")
COMPILE = ("compile_default", "compile_reduce-overhead")
# Which rows torch.compile goes to first: the references of issue 37's acceptance (where it helped
# most on the H200 first), then the rest; each row's modes in turn.
COMPILE_ORDER = ("convnet_b128", "mlp_b64", "mlp_b1024", "wide_b4096_f32", "vit_b128", "gpt_b64",
                 "wide_b4096_bf16", "wide_b4096_f16")
# The rows issue 37's acceptance compares with (gpu_check_accept.py): run before the others.
REFERENCE_ROWS = ("mlp_b64", "mlp_b1024", "convnet_b128", "wide_b4096_f32")
# A configuration's steps/s is timed over at least this many seconds after its warm-up.
STEADY_SECONDS = 1.0


def log(msg: str) -> None:
    print(f"[reference_gpu] {msg}", file=sys.stderr, flush=True)


# (name, model, batch, fewest timed steps, autocast dtype, where batches come from)
ROWS = (
    ("mlp_b64", "mlp", 64, 200, None, "device"),
    ("mlp_b1024", "mlp", 1024, 100, None, "device"),
    ("convnet_b128", "convnet", 128, 100, None, "device"),
    ("wide_b4096_f32", "wide", 4096, 30, None, "pinned"),
    ("wide_b4096_bf16", "wide", 4096, 30, "bf16", "pinned"),
    ("wide_b4096_f16", "wide", 4096, 30, "f16", "pinned"),
    ("vit_b128", "vit", 128, 30, None, "pinned"),
    ("gpt_b64", "gpt", 64, 30, None, "pinned"),
)


def configs_of(feed: str) -> tuple[str, ...]:
    extra = ("eager_fused_async", "graph_async") if feed == "pinned" else ()
    return EAGER + ("graph",) + extra


@functools.lru_cache(maxsize=None)  # each configuration builds the row's model anew
def transformer_sizes(model: str, text: str | None):
    """reference_transformer's default sizes (compare_transformer.sh's) and GPT's vocabulary."""
    import reference_transformer as rt

    ns = SimpleNamespace(model=model, patch=4, dim=64, heads=4, depth=4, mlp=128, seq=64)
    if model == "gpt":
        ns.dim, ns.depth = 128, 2
    vocab = 10
    if model == "gpt":
        try:
            vocab = len(set(rt.read_text(text)))
        except OSError as e:  # the vocabulary's size is all it needs: Debian's texts have ~100
            log(f"gpt: no text ({e}); assuming 100 distinct characters")
            vocab = 100
    return ns, vocab


def build_model(torch, kind: str, text: str | None):
    """(model, per-example input shape, input dtype, classes)."""
    nn = torch.nn
    if kind in ("mlp", "wide"):
        h = 128 if kind == "mlp" else 4096
        return nn.Sequential(nn.Linear(784, h), nn.ReLU(), nn.Dropout(0.2), nn.Linear(h, 10)), (784,), torch.uint8, 10
    if kind == "convnet":
        return (nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.5), nn.Linear(1600, 10)),
                (1, 28, 28), torch.uint8, 10)
    import reference_transformer as rt

    ns, vocab = transformer_sizes(kind, text)
    model = rt.torch_model(torch, ns, vocab)
    if kind == "vit":
        return model, (1, 28, 28), torch.uint8, 10
    return model, (ns.seq,), torch.int64, vocab


class Row:
    """One row's model, optimizer and batches on `dev`; runs one configuration at a time."""

    def __init__(self, torch, dev, spec, config: str, args):
        name, kind, batch, _, amp, feed = spec
        self.torch, self.dev, self.config = torch, dev, config
        torch.manual_seed(1)
        model, shape, in_dtype, self.classes = build_model(torch, kind, args.text)
        self.model = model.to(dev).train()
        opt_kw = {}
        if config.startswith(("eager_fused", "graph")):
            opt_kw["fused"] = True
        if config.startswith("graph"):
            opt_kw["capturable"] = True
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, eps=1e-7, **opt_kw)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.amp = {"bf16": torch.bfloat16, "f16": torch.float16, None: None}[amp]
        on_cpu = dev.type == "cpu"
        if on_cpu and self.amp == torch.float16:
            self.amp = None  # the dry run: no float16 autocast on the CPU
        self.scaler = None
        if self.amp == torch.float16:  # torch.amp.GradScaler("cuda") since 2.3; torch.cuda.amp's before
            amp_scaler = getattr(torch.amp, "GradScaler", None)
            self.scaler = amp_scaler("cuda") if amp_scaler else torch.cuda.amp.GradScaler()
        # Device-fed rows keep float32 batches on the GPU; host-fed rows keep their raw batches
        # (uint8 pixels, int64 ids) in pinned host memory.
        g = torch.Generator().manual_seed(3)
        xs, ys = [], []
        tgt_shape = (batch, shape[0]) if kind == "gpt" else (batch,)
        for _ in range(8):
            if in_dtype == torch.int64:
                x = torch.randint(0, self.classes, (batch, *shape), generator=g)
            elif feed == "device":
                x = torch.rand((batch, *shape), generator=g)
            else:
                x = torch.randint(0, 256, (batch, *shape), generator=g, dtype=torch.uint8)
            y = torch.randint(0, self.classes, tgt_shape, generator=g)
            if feed == "device":
                x, y = x.to(dev), y.to(dev)
            elif not on_cpu:
                x, y = x.pin_memory(), y.pin_memory()
            xs.append(x)
            ys.append(y)
        self.xs, self.ys = xs, ys

    def autocast(self, cache: bool = True):
        if self.amp is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.dev.type, dtype=self.amp, cache_enabled=cache)

    def body(self, raw, y, cache: bool = True):
        """Forward, backward and update on a raw batch (uint8 pixels are scaled on the device)."""
        x = raw.float().div_(255) if raw.dtype == self.torch.uint8 else raw
        with self.autocast(cache):
            out = self.model(x)
            loss = self.loss_fn(out.reshape(-1, self.classes).float(), y.reshape(-1))
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        return loss

    def batch(self, i: int):
        x, y = self.xs[i % 8], self.ys[i % 8]
        return x.to(self.dev, non_blocking=True), y.to(self.dev, non_blocking=True)

    def stepper(self):
        """A function of the step's index that runs one step and returns its loss tensor."""
        torch = self.torch
        if self.config.startswith("eager"):
            def eager(i):
                self.opt.zero_grad(set_to_none=True)
                return self.body(*self.batch(i))
            return eager
        if self.config.startswith("compile"):
            mode = self.config.split("_", 1)[1]

            def step(x, y):
                self.opt.zero_grad(set_to_none=True)
                return self.body(x, y)
            fn = torch.compile(step, mode=None if mode == "default" else mode)
            return lambda i: fn(*self.batch(i))
        # graph: static input and target tensors, warm-up on a side stream, then one capture
        sx, sy = (t.to(self.dev).clone() for t in (self.xs[0], self.ys[0]))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                self.body(sx, sy, cache=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = self.body(sx, sy, cache=False)

        def replay(i):
            sx.copy_(self.xs[i % 8], non_blocking=True)
            sy.copy_(self.ys[i % 8], non_blocking=True)
            graph.replay()
            return static_loss
        return replay


def steps_per_second(row: Row, steps: int, warmup: int, seconds: float = 0.0) -> float:
    """Over at least `steps` steps and `seconds` (of the host's loop: an async configuration's
    queue is drained before the clock stops) after `warmup` steps."""
    torch, sync_each = row.torch, not row.config.endswith("_async")
    run = row.stepper()
    cuda = row.dev.type == "cuda"
    loss = None
    for i in range(warmup):
        loss = run(i)
        if sync_each:
            loss.item()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    i = 0
    while i < steps or time.perf_counter() - t0 < seconds:
        loss = run(i)
        if sync_each:
            loss.item()
        i += 1
    steps = i
    final = float(loss)
    if cuda:
        torch.cuda.synchronize()
    sps = steps / (time.perf_counter() - t0)
    if final != final:
        raise RuntimeError("the loss is NaN")
    return sps


class TimeLimit(BaseException):
    """A configuration ran past its time (time_limit); not an Exception, so that no handler of
    torch's (which may catch those and go on) keeps it from stopping the configuration."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raises TimeLimit in the main thread after `seconds` (SIGALRM: it interrupts Python code and
    waits, torch.compile's included; a CUDA call returns first)."""
    def expire(signum, frame):
        raise TimeLimit()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def gemm_peaks(torch, dev, quick: bool, out: dict) -> None:
    """The chip's GEMM peak as PyTorch (cuBLAS) reaches it, for comparison with gpu_bench's."""
    for dtype, label in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        a = torch.rand((8192, 8192), device=dev, dtype=dtype)
        b = torch.rand((8192, 8192), device=dev, dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        iters = 5 if quick else 20
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        out[f"torch_gemm_{label}_8192_tflops"] = 2 * 8192**3 * iters / (time.perf_counter() - t0) / 1e12


def dry_run(torch, args, rows) -> int:
    """Every row's model built on the CPU, its eager step run twice on a batch of 8."""
    dev, failed = torch.device("cpu"), 0
    for spec in rows:
        small = (spec[0], spec[1], 8, 2, spec[4], spec[5])
        try:
            sps = steps_per_second(Row(torch, dev, small, "eager_foreach", args), steps=1, warmup=1)
            log(f"dry run: {spec[0]}: eager step ran on the CPU ({sps:.1f} steps/s at batch 8); on a GPU: "
                f"{', '.join(configs_of(spec[5]) + COMPILE)}")
        except Exception as e:  # noqa: BLE001 - report every row
            log(f"dry run: {spec[0]}: FAILED: {type(e).__name__}: {e}")
            failed = 1
    # --cap's mechanism: a configuration that runs on past its time is stopped.
    spec = rows[0]
    small = (spec[0], spec[1], 8, 10**9, spec[4], spec[5])
    t0 = time.perf_counter()
    try:
        with time_limit(0.2):
            steps_per_second(Row(torch, dev, small, "eager_foreach", args), steps=small[3], warmup=0)
        log("dry run: FAILED: a configuration past its cap ran to its end")
        failed = 1
    except TimeLimit:
        log(f"dry run: {spec[0]}: a configuration past its 0.2 s cap stopped after {time.perf_counter() - t0:.2f} s")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a fifth of the steps")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds from the start after which no configuration starts or runs on")
    ap.add_argument("--cap", type=float, default=40.0,
                    help="seconds one configuration may take (torch.compile's compilation included)")
    ap.add_argument("--rows", default="", help="comma-separated prefixes of the rows to run (default: all)")
    ap.add_argument("--text", help="gpt: the text whose distinct characters are the vocabulary "
                                   "(default: /usr/share/common-licenses, as lockstep train's)")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU: build every model, run its eager step")
    args = ap.parse_args()
    prefixes = [p for p in args.rows.split(",") if p]
    rows = [r for r in ROWS if not prefixes or any(r[0].startswith(p) for p in prefixes)]
    if not rows:
        ap.error(f"--rows {args.rows!r} selects none of {', '.join(r[0] for r in ROWS)}")
    try:
        import torch
    except ImportError as e:
        log(f"no torch: {e}")
        return 3
    if args.dry_run:
        return dry_run(torch, args, rows)
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 77
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False  # lockstep's float32 GEMM is float32
    torch.backends.cudnn.allow_tf32 = False
    log(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    out: dict[str, float | str | None] = {}
    t_start = time.perf_counter()

    def emit() -> None:  # the figures so far, one JSON line each time (the last line holds them all)
        if args.json:
            print(json.dumps(out), flush=True)

    skipped: list[str] = []
    out["skipped"] = skipped

    def skip(name: str, config: str, why: str) -> bool:
        log(f"{name} ({config}): skipped: {why}")
        skipped.append(f"{name} ({config}): {why}")
        return False

    def run(spec, config: str) -> bool:
        """Runs one configuration within --cap and what is left of --budget; False if it did not."""
        name, steps = spec[0], spec[3] // (5 if args.quick else 1)
        left = args.budget - (time.perf_counter() - t_start)
        if left < 1:
            return skip(name, config, f"past the {args.budget:.0f} s budget")
        limit = min(args.cap, left)
        try:
            with time_limit(limit):
                sps = steps_per_second(Row(torch, dev, spec, config, args), steps,
                                       warmup=60 if config.startswith("compile") else 30,
                                       seconds=STEADY_SECONDS / (4 if args.quick else 1))
            log(f"{name} ({config}): {sps:.1f} steps/s")
        except TimeLimit:
            return skip(name, config, f"stopped after {limit:.0f} s (" +
                        ("its cap" if limit == args.cap else "the budget's end") + ")")
        except Exception as e:  # noqa: BLE001 - torch.compile needs a compiler and triton, a capture may fail
            first = str(e).splitlines()[0] if str(e) else ""
            return skip(name, config, f"failed: {type(e).__name__}: {first}"[:300])
        finally:
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
            if config.startswith("compile"):
                with contextlib.suppress(Exception):
                    torch._dynamo.reset()  # its caches and graphs go with the configuration
            torch.cuda.empty_cache()
        out[f"{name}_{config}"] = sps
        if sps > (out.get(name) or 0):
            out[name], out[f"{name}_config"] = sps, config
        return True

    # Issue 37's reference rows first, then the others: each group's eager and graph configurations,
    # then torch.compile's by value (cuBLAS's GEMM peak between the groups), so that a run cut off
    # by its budget keeps what came before.
    by_name = {r[0]: r for r in rows}
    for group in ([r for r in rows if r[0] in REFERENCE_ROWS], [r for r in rows if r[0] not in REFERENCE_ROWS]):
        for spec in group:
            for config in configs_of(spec[5]):
                run(spec, config)
            out.setdefault(spec[0], None)
            emit()
        for name in (n for n in COMPILE_ORDER if n in by_name and by_name[n] in group):
            if run(by_name[name], COMPILE[0]):
                run(by_name[name], COMPILE[1])
            else:
                skip(name, COMPILE[1], f"{COMPILE[0]} did not run")
            emit()
        if group and "torch_gemm_f32_8192_tflops" not in out and time.perf_counter() - t_start < args.budget:
            gemm_peaks(torch, dev, args.quick, out)
            emit()
    if not args.json:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
