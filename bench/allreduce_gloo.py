#!/usr/bin/env python3
"""PyTorch's gloo all-reduce (what DDP uses on CPU) on the sizes `lockstep bench allreduce
--workers` measures, for comparison: W local processes, float32 sum, in nccl-tests' terms
(busbw = algbw * 2(W-1)/W, the slowest rank's mean time after a warm-up).

    python3 bench/allreduce_gloo.py --workers 2 --min-bytes 4096 --max-bytes 268435456
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    w = args.workers
    if rank == 0:
        print(f"# PyTorch {torch.__version__} gloo all_reduce: {w} processes, float32 sum; busbw = algbw * 2(W-1)/W")
        print(f"{'size':>10} {'count(f32)':>12} {'gloo(us)':>12} {'gloo_busbw':>12}")
    size = args.min_bytes
    while size <= args.max_bytes:
        t = torch.ones(size // 4)
        iters = max(5, min(1000, (256 << 20) // size))
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        mine = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        sec = mine.item()
        if rank == 0:
            busbw = size / sec / 1e9 * 2 * (w - 1) / w
            label = f"{size >> 20}MiB" if size >= (1 << 20) else f"{size >> 10}KiB"
            print(f"{label:>10} {size // 4:>12} {sec * 1e6:>12.1f} {busbw:>12.2f}", flush=True)
        size *= 2
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=4 << 10)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--port", type=int, default=29511)
    args = p.parse_args()
    if args.workers < 2 or args.min_bytes < 4 or args.min_bytes > args.max_bytes:
        p.error("--workers must be >= 2 and 4 <= --min-bytes <= --max-bytes")
    mp.spawn(worker, args=(args, args.port), nprocs=args.workers, join=True)


if __name__ == "__main__":
    main()
