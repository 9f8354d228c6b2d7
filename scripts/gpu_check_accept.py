#!/usr/bin/env python3
"""The acceptance lines of scripts/gpu_check.sh, from its logs (the folder it writes, or the
gpu_check_logs.tar.gz it leaves in $OUT, unpacked): one line per acceptance point,

    ACCEPT <issue>.<point> ratio=<r> goal=<g> PASS|FAIL|MISSING <what, with both figures>

(MISSING: a figure is absent: its part failed, was skipped or is not in this build), in aligned
columns: one table, with a SUMMARY line of the points the device run is for (issue 37's 1-4, 42's 1),
then INFO lines of figures without a goal. Standard library only; exit 0 whatever the verdicts.
--emulated (gpu_check.sh --emulated's logs) heads the table with a line saying the figures are the
CPU's on shrunk runs: the verdicts check that every figure is found, not the goals.

    python3 scripts/gpu_check_accept.py [--emulated] LOGDIR
"""

from __future__ import annotations

import json
import os
import re
import sys


class Logs:
    def __init__(self, path: str):
        self.path = path

    def text(self, name: str) -> str:
        try:
            with open(os.path.join(self.path, name), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def last_json(self, name: str) -> dict:
        """The last line of NAME.log that is a JSON object (the benches print their figures so far)."""
        for line in reversed(self.text(f"{name}.log").splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        return {}

    def torch(self) -> dict:
        """bench/reference_gpu.py's figures: its part for issue 37's rows and the transformers' part."""
        out: dict = {}
        for part in ("torch_reference", "torch_transformers"):
            figures = self.last_json(part)
            skipped = out.get("skipped", []) + (figures.pop("skipped", None) or [])
            out.update(figures)
            out["skipped"] = skipped
        return out

    def phase_lines(self, name: str) -> list[str]:
        """LOCKSTEP_PHASE_TIMES=1's lines in NAME.log (fit's loop, each replica's phases)."""
        return [ln.split("phase times, ", 1)[1] for ln in self.text(f"{name}.log").splitlines()
                if "lockstep: phase times, " in ln]

    def fit(self, name: str) -> float | None:
        """train_steps_per_second of `train NAME` (its --metrics-out NAME.json)."""
        try:
            return float(json.loads(self.text(f"{name}.json"))["train_steps_per_second"]) or None
        except (ValueError, KeyError, TypeError):
            return None

    def capture(self, name: str) -> str:
        """Whether `train NAME` replayed its train steps from a graph (jit_compile), or why not."""
        try:
            reason = json.loads(self.text(f"{name}.json"))["jit_compile_reason"]
        except (ValueError, KeyError, TypeError):
            return "(capture not reported)"
        return "captured into one graph" if not reason else f"ran eagerly: {reason}"

    def history(self, name: str, key: str) -> float | None:
        """The last epoch's KEY in `train NAME`'s history (peak_memory_mib, ...)."""
        try:
            return float(json.loads(self.text(f"{name}.json"))["history"][key][-1])
        except (ValueError, KeyError, TypeError, IndexError):
            return None

    def status(self) -> dict[str, str]:
        out = {}
        for line in self.text("status.tsv").splitlines():
            parts = line.split("\t")
            if len(parts) >= 2:
                out[parts[0]] = parts[1]
        return out


def fmt(v, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def cells(head: str, ratio: str, goal: str, verdict: str, what: str) -> str:
    """One line: HEAD ("ACCEPT 37.1": a row of the table, in aligned columns; or "INFO")."""
    if not head.startswith("ACCEPT"):
        return f"{head} ratio={ratio} {verdict} {what}"
    return f"{head:<11} ratio={ratio:<7} goal={goal:<4} {verdict:<7} {what}"


def accept(point: str, num, den, goal: float, what: str) -> str:
    """One ACCEPT line: num / den against goal (num, den: figures or None)."""
    if not num or not den:
        return cells(f"ACCEPT {point}", "n/a", f"{goal:g}", "MISSING", what)
    r = num / den
    return cells(f"ACCEPT {point}", f"{r:.3g}", f"{goal:g}", "PASS" if r >= goal else "FAIL", what)


def torch_best(theirs: dict, row: str) -> tuple[float | None, str]:
    v = theirs.get(row)
    return (v, f"torch {fmt(v)} [{theirs.get(row + '_config', '?')}]") if v else (None, "torch n/a")


def tests_verdict(head: str, log: str, pattern: str, what: str) -> str:
    """HEAD ("ACCEPT 37.5", or "INFO") and PASS when tests matching pattern ran in gtest's log and none failed."""
    goal = "all" if head.startswith("ACCEPT") else ""
    ok = set(re.findall(rf"\[\s+OK \] (\S*(?:{pattern})\S*)", log))
    failed = set(re.findall(rf"\[  FAILED  \] (\S*(?:{pattern})\S*)", log))
    if not ok and not failed:
        return cells(head, "n/a", goal, "MISSING", f"{what}: no test matching /{pattern}/ ran")
    return cells(head, f"{len(ok - failed)}/{len(ok | failed)}", goal, "FAIL" if failed else "PASS",
               what + (f" (failed: {', '.join(sorted(failed))})" if failed else ""))


# The points the device run is for (issues 37 and 42): the SUMMARY line counts their verdicts.
DEVICE_POINTS = ("37.1", "37.2", "37.3", "37.4", "42.1")


def summary(lines: list[str]) -> str:
    mine = [ln.split() for ln in lines if ln.startswith("ACCEPT ") and ln.split()[1] in DEVICE_POINTS]
    counts = {v: sum(1 for f in mine if f[4] == v) for v in ("PASS", "FAIL", "MISSING")}
    return (f"SUMMARY issue 37 points 1-4 and 42.1: {counts['PASS']} PASS, {counts['FAIL']} FAIL, "
            f"{counts['MISSING']} MISSING of {len(mine)}")


def main(argv: list[str]) -> int:
    emulated = "--emulated" in argv[1:2]
    argv = [a for a in argv if a != "--emulated"]
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: gpu_check_accept.py [--emulated] LOGDIR (scripts/gpu_check.sh's logs)", file=sys.stderr)
        return 2
    logs = Logs(argv[1])
    ours, theirs, status = logs.last_json("gpu_bench"), logs.torch(), logs.status()
    lines = []
    # Issue 42 acc. 1: the seeds' custom loop on the GPU.
    m = re.findall(r"Test Accuracy: ([0-9.]+)", logs.text("custom_loop.log"))
    acc = float(m[-1]) if m else None
    lines.append(accept("42.1", acc, 1.0, 0.97, f"examples/custom_loop on gpu:0, test accuracy {fmt(acc, 4)} "
                                                f"(part exit {status.get('custom_loop', 'not run')})"))
    # Issue 37 acc. 1: fit at >= 90% of its own bare step.
    for b in (64, 1024):
        fit, bare = logs.fit(f"fit_b{b}"), ours.get(f"mlp_b{b}_steps_per_s")
        lines.append(accept("37.1", fit, bare, 0.9, f"flagship, global batch {b}: lockstep train --devices gpu:0 "
                                                    f"{fmt(fit)} steps/s, bare step (gpu_bench) {fmt(bare)}"))
    # Issue 37 acc. 2: the bare steps against PyTorch's best.
    for row, key, goal, what in (("mlp_b64", "mlp_b64_steps_per_s", 1.5, "flagship bare step, batch 64"),
                                 ("mlp_b1024", "mlp_b1024_steps_per_s", 1.5, "flagship bare step, batch 1024"),
                                 ("convnet_b128", "convnet_b128_steps_per_s", 1.3, "convnet bare step, batch 128")):
        t, label = torch_best(theirs, row)
        lines.append(accept("37.2", ours.get(key), t, goal, f"{what}: lockstep {fmt(ours.get(key))} steps/s, {label}"))
    # Issue 37 acc. 3: the wide MLP through fit.
    f32, bf16, f16 = logs.fit("wide_f32"), logs.fit("wide_bf16"), logs.fit("wide_f16")
    t, label = torch_best(theirs, "wide_b4096_f32")
    lines.append(accept("37.3", f32, t, 1.2, f"wide MLP float32 through fit, batch 4096: lockstep {fmt(f32)} steps/s, "
                                             f"{label} (pinned host batches)"))
    lines.append(accept("37.3", bf16, f32, 1.8, f"wide MLP through fit: mixed_bfloat16 {fmt(bf16)} steps/s over "
                                                f"lockstep's float32 {fmt(f32)}"))
    # Issue 37 acc. 4: logical replicas.
    x4, one = logs.fit("fit_b1024_x4"), logs.fit("fit_b1024")
    lines.append(accept("37.4", x4, one, 0.8, f"fit at global batch 1024: gpu:0x4 {fmt(x4)} steps/s, gpu:0 {fmt(one)}; "
                                              f"gpu:0x4's train step {logs.capture('fit_b1024_x4')}"))
    # Issue 37 acc. 5: jit_compile on and off give the same bits (the capture helper's gpu test).
    lines.append(tests_verdict("ACCEPT 37.5", logs.text("gpu_tests.log"), r"JitCompile|Capture",
                               "jit_compile on/off bit-identical and named fallbacks (gpu_tests)"))
    lines.append(tests_verdict("ACCEPT 37.5", logs.text("gpu_tests.log"), r"StepsPerExecution",
                               "steps_per_execution gives the weights of 1 (gpu_tests)"))
    # Issue 40 acc. 5: the transformers through fit against PyTorch's best on the GPU.
    for name, row in (("vit", "vit_b128"), ("gpt", "gpt_b64")):
        ours_t = logs.fit(name)
        t, label = torch_best(theirs, row)
        lines.append(accept("40.5", ours_t, t, 1.3, f"{name} through fit on gpu:0: lockstep {fmt(ours_t)} steps/s, {label}"))
    lines += cores_lines(logs.last_json("cores"))
    head = [f"{'# point':<11} {'ratio':<13} {'goal':<9} {'verdict':<7} what (ratio = figure / reference; PASS: >= goal)"]
    if emulated:
        head.insert(0, "EMULATED GPUs (gpu_check.sh --emulated): every figure is the CPU's, on shrunk runs; "
                       "PASS/FAIL below say the figures are found, not whether a goal is met")
    print("\n".join(head + lines + [summary(lines)] + info_lines(logs, ours, theirs, status)))
    return 0


def cores_lines(c: dict) -> list[str]:
    """Issue 38 acc. 1, 2, 4 from bench/compare_cores.sh --json (one round)."""
    models = c.get("models") or {}
    if not models:
        return [cells("ACCEPT 38.1", "n/a", "0.6", "MISSING", "bench/compare_cores.sh's figures (part cores)")]
    cores, out = c.get("cores"), []
    full = str(cores)
    for key, m in sorted(models.items()):
        lay = m.get("layouts", {})
        best = max((k for k in lay if k != "core1" and lay[k].get("steps_per_s")),
                   key=lambda k: lay[k]["steps_per_s"], default=None)
        tag = f"hidden {m['hidden']}, global batch {m['batch']}, {cores} cores"
        if m["batch"] == 4096:
            share = lay.get(best, {}).get("share_of_peak") if best else None
            goal = 0.6 if m["hidden"] == 128 else 0.7
            out.append(accept("38.1", share, 1.0, goal, f"{tag}: best layout cpu:{best} at {fmt(share and 100 * share)}% "
                                                        "of the measured sgemm peak"))
        scale = m.get("strong_scaling", {}).get(best) if best else None
        out.append(accept("38.2", scale, 1.0, 10 if m["batch"] == 4096 else 6,
                          f"{tag}: strong scaling from one core, best layout cpu:{best}"))
        one, alln = lay.get("1", {}).get("steps_per_s"), lay.get(full, {}).get("steps_per_s")
        out.append(accept("38.4", alln, one, 1.0, f"{tag}: cpu:{cores} {fmt(alln)} steps/s vs cpu:1 {fmt(one)}"))
        vs = m.get("over_torch_all", {}).get(full)
        out.append(accept("38.4", vs, 1.0, 2.0, f"{tag}: cpu:{cores} over PyTorch on {cores} threads"))
    return out


def info_lines(logs: Logs, ours: dict, theirs: dict, status: dict) -> list[str]:
    out = []
    for d in ("bf16", "f16"):
        v = logs.fit(f"wide_{d}")
        t, label = torch_best(theirs, f"wide_b4096_{d}")
        out.append(f"INFO wide MLP {d} through fit: lockstep {fmt(v)} steps/s, {label}"
                   + (f" ({v / t:.2f}x)" if v and t else ""))
    one, eight = logs.fit("fit_b64"), logs.fit("fit_b64_spe8")
    out.append(f"INFO fit, flagship batch 64: steps_per_execution 1 {fmt(one)} / 8 {fmt(eight)} steps/s")
    sync = logs.fit("fit_b64_sync")
    out.append(f"INFO fit, flagship batch 64: numbers read once per 16 steps {fmt(one)} / each step {fmt(sync)} steps/s")
    accum = logs.fit("fit_b64_accum4")
    out.append(f"INFO fit, flagship batch 64: one update per batch {fmt(one)} / per 4 accumulated {fmt(accum)} steps/s "
               f"(its train step {logs.capture('fit_b64_accum4')})")
    for b in ("64", "1024"):
        on, off = logs.fit(f"fit_b{b}"), logs.fit("prefetch_off" if b == "64" else f"prefetch_off_{b}")
        out.append(f"INFO fit, flagship batch {b}: prefetch to device on {fmt(on)} / off {fmt(off)} steps/s")
    f32m, bf16m = logs.history("cnn_mem_f32", "peak_memory_mib"), logs.history("cnn_mem_bf16", "peak_memory_mib")
    out.append(f"INFO convnet peak device memory (issue 42 point 5): float32 {fmt(f32m)} MiB, mixed_bfloat16 "
               f"{fmt(bf16m)} MiB" + (f" ({bf16m / f32m:.2f}x)" if f32m and bf16m else ""))
    lg, one = ours.get("mlp_b1024_4logical_steps_per_s"), ours.get("mlp_b1024_steps_per_s")
    out.append(f"INFO bare step at batch 1024 on gpu:0x4: {fmt(lg)} steps/s, gpu:0 {fmt(one)}")
    for d in ("f32", "bf16", "f16"):
        peak, big = ours.get(f"gemm_{d}_peak_tflops"), ours.get(f"gemm_{d}_b1024_4096_tflops")
        out.append(f"INFO GEMM {d}: lockstep peak {fmt(peak)} TFLOP/s (torch 8192^3 {fmt(theirs.get(f'torch_gemm_{d}_8192_tflops'))}); "
                   f"1024x4096x4096 {fmt(big)}" + (f" = {100 * big / peak:.0f}% of peak" if big and peak else ""))
    bw, cp = ours.get("allreduce_4_logical_busbw_gbs"), ours.get("device_copy_gbs")
    out.append(f"INFO all-reduce among 4 logical replicas: bus bandwidth {fmt(bw)} GB/s, device copy {fmt(cp)} GB/s")
    rows = sorted(k for k in theirs if theirs.get(k + "_config"))
    for r in rows:
        configs = ", ".join(f"{k[len(r) + 1:]} {fmt(v)}" for k, v in theirs.items()
                            if k.startswith(r + "_") and k != r + "_config" and isinstance(v, (int, float)))
        out.append(f"INFO torch {r}: {configs}")
    if theirs.get("skipped"):
        out.append("INFO torch configurations not run (the reference is the best of those that ran): "
                   + "; ".join(theirs["skipped"]))
    # Where fit's time goes on the device: each fit run's phase times (ms per step).
    for name in ("fit_b64", "fit_b1024", "fit_b1024_x4", "wide_f32", "wide_bf16", "wide_f16", "profile", "profile_x4"):
        out += [f"INFO phases {name}: {ln}" for ln in logs.phase_lines(name)]
    out.append(tests_verdict("INFO", logs.text("gpu_tests.log"), "FourLogicalReplicas",
                             "4 logical replicas of one GPU compute what one device does (gpu_tests)"))
    bad = [f"{n} ({s})" for n, s in status.items() if s != "0"]
    out.append("INFO parts not passed: " + (", ".join(bad) if bad else "none"))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv))
