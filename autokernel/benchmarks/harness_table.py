"""Run the harness on every starter on the GPU and write the table for docs/.

    python -m autokernel.benchmarks harness-table [--out docs/benchmarks/harness-starters-<gpu>.md]
                                        [--repeats 5] [--device cuda] [--quick]
                                        [--backend triton|cuda]

`--backend cuda` judges the CUDA C++ starters (`autokernel/kernels/cuda/`) instead, each with its
type's Triton starter as the incumbent, timed in the same rounds: the table's last column is then
the paired speedup of CUDA over Triton with its 95% interval (the issue-15 table).

For every kernel type it runs `run_bench` on the shipped starter exactly as `autokernel bench`
does (a fresh worker per call, five stages over every dtype, anti-cheat, interleaved timing at the
op's bench shapes in fp16), with a fresh baseline cache, so the first call also compiles and times
the torch.compile baseline. The table has one row per timed shape: status, latency (median, IQR),
throughput, % of peak against the datasheet and the measured ceilings, speedup vs eager and vs
torch.compile, and the harness's wall time for that kernel.

Then it measures the harness's own speed, the number the loop lives with: `--repeats` more calls
on the softmax and rmsnorm starters at their primary bench shape (baseline cache warm, as in a
run), and reports the median wall time per kernel against the 10 s target, with the worker's
time by phase.

It writes the markdown to --out (default docs/benchmarks/harness-starters-<gpu>.md), the raw
BenchResults beside it as .json, and prints the markdown. Exits 1 if a starter does not PASS or
the median harness time of softmax or rmsnorm exceeds 10 s. `--device cpu --quick` runs the same
script on the interpreter (a smoke test of the script; its timings mean nothing).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autokernel.benchmarks.record import REPO
from autokernel.versions import source_commit

TARGET_SECONDS = 10.0
SPEED_KERNELS = ("softmax", "rmsnorm")


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def run_kernel(kernel_type: str, device: str, cache_dir: Path, quick: bool,
               shapes: list[Any] | None, backend: str = "triton") -> Any:
    from autokernel.harness.runner import run_bench
    from autokernel.kernels import starter_path

    incumbent = starter_path(kernel_type) if backend != "triton" else None
    return run_bench(starter_path(kernel_type, backend), device=device, shapes=shapes,
                     cache_dir=cache_dir, quick=quick, timeout_s=900, incumbent=incumbent)


def vs_incumbent(t: Any) -> str:
    if t.vs_incumbent is None:
        return "-"
    return f"{t.vs_incumbent:.2f}x [{fmt(t.vs_incumbent_lo)}, {fmt(t.vs_incumbent_hi)}]"


def table_rows(kernel_type: str, result: Any) -> list[str]:
    from autokernel.ops import get_spec

    spec = get_spec(kernel_type)
    if not result.timings:
        return [f"| {kernel_type} | **{result.status.value}** {result.stage or ''}: "
                f"{result.reason[:120]} | - | - | - | - | - | - | - | - | "
                f"{fmt(result.harness_seconds)} | - |"]
    rows = []
    for i, t in enumerate(result.timings):
        shape = spec.format_shape(tuple(t.shape))
        status = result.status.value if i == 0 else ""
        compile_us = fmt(t.compile_us) + (" (cached)" if t.compile_cached else "")
        throughput = "-" if t.throughput is None else f"{t.throughput:,.1f} {t.throughput_unit}"
        rows.append(
            f"| {kernel_type if i == 0 else ''} | {status} | {shape} | {t.dtype} | "
            f"{fmt(t.latency_us)} ± {fmt(t.iqr_us)} | {fmt(t.eager_us)} | {compile_us} | "
            f"{throughput} | {fmt(t.pct_peak_datasheet)} / {fmt(t.pct_peak_measured)} | "
            f"{speedup(t.speedup_vs_eager)} / {speedup(t.speedup_vs_compile)} | "
            f"{fmt(result.harness_seconds) if i == 0 else ''} | {vs_incumbent(t)} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="fewer shapes (smoke test)")
    parser.add_argument("--kernels", nargs="*", default=None)
    parser.add_argument("--backend", default="triton", choices=("triton", "cuda"))
    args = parser.parse_args(argv)

    import torch
    import triton

    from autokernel.ops import KERNEL_TYPES, get_spec

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU visible; use --device cpu --quick to smoke-test the script",
              file=sys.stderr)
        return 2
    if args.device == "cpu":
        from autokernel.device import use_device

        use_device("cpu")
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (Triton interpreter)"
    from autokernel.kernels import CUDA_KERNELS_DIR

    kernels = args.kernels or [k for k in KERNEL_TYPES if args.backend == "triton"
                               or (CUDA_KERNELS_DIR / f"{k}.py").is_file()]
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    suffix = "-cuda" if args.backend == "cuda" else ""
    out = args.out or REPO / "docs" / "benchmarks" / f"harness-starters{suffix}-{slug}.md"
    started = datetime.now(timezone.utc)
    ok = True

    with tempfile.TemporaryDirectory(prefix="autokernel-table-") as scratch:
        cache = Path(scratch) / "cache"  # cold: the first call per kernel compiles its baseline
        results: dict[str, Any] = {}
        for kernel_type in kernels:
            spec = get_spec(kernel_type)
            shapes = None if args.device == "cpu" else ["x".join(map(str, s))
                                                       for s in spec.bench_shapes]
            began = time.perf_counter()
            results[kernel_type] = run_kernel(kernel_type, args.device, cache, args.quick, shapes,
                                              args.backend)
            result = results[kernel_type]
            ok &= result.passed
            print(f"{kernel_type}: {result.status.value} in {time.perf_counter() - began:.1f} s"
                  f" {result.reason[:200]}", file=sys.stderr, flush=True)

        speed: dict[str, list[Any]] = {}
        for kernel_type in [k for k in SPEED_KERNELS if k in kernels]:
            speed[kernel_type] = [run_kernel(kernel_type, args.device, cache, args.quick, None,
                                             args.backend) for _ in range(args.repeats)]

    lines = [
        f"# Harness results for the {'CUDA C++' if args.backend == 'cuda' else 'Triton'} "
        "starters",
        "",
        f"- GPU: **{gpu}**",
        f"- torch {torch.__version__}, triton {triton.__version__}, Python "
        f"{sys.version.split()[0]}",
        f"- autokernel commit: `{source_commit(REPO)}`",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        "- command: `python -m autokernel.benchmarks harness-table"
        f"{' --quick' if args.quick else ''}"
        f"{'' if args.device == 'cuda' else ' --device cpu'}"
        f"{' --backend cuda' if args.backend == 'cuda' else ''}`",
        "",
        "Method: `autokernel bench` on each shipped starter (`autokernel/kernels/<type>.py`), "
        "one fresh worker process per call. Correctness: static scan, then the five stages "
        "(smoke, shape sweep, numerical stability, determinism, edge sizes) in fp16, bf16 and "
        "fp32 with every anti-cheat detector armed. Timing at each of the op's bench shapes in "
        "fp16: the candidate, eager PyTorch (the registry's stock path) and `torch.compile` of it "
        "(dynamic=False, default mode, compiled once and warmed) interleaved round-robin; before "
        "every timed call the same input buffers are refilled with fresh random values and L2 is "
        "flushed by writing 256 MiB; CUDA events on the harness's stream, a device-wide "
        "synchronize after each call; at least 20 rounds, time-boxed (1 s for the first shape, "
        "0.5 s for the others); median and interquartile range. Throughput and % of peak come "
        "from `autokernel.gpu.roofline` (registry FLOP/byte formulas; datasheet peaks, and the "
        "measured copy/GEMM ceilings). Harness time is the wall time of the whole `run_bench` "
        "call, worker start to verdict, with a cold baseline cache (it includes compiling the "
        "torch.compile baseline).",
        "",
        "| kernel | status | shape | dtype | latency us (± IQR) | eager us | compile us | "
        "throughput | % peak datasheet / measured | vs eager / vs compile | harness s | "
        "vs Triton starter (paired, 95%) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kernel_type, result in results.items():
        lines.extend(table_rows(kernel_type, result))
    failures = [f"- {k}: {r.status.value} at {r.stage}: {r.reason}"
                for k, r in results.items() if not r.passed]
    if failures:
        lines += ["", "Starters that did not pass:", *failures]

    if speed:
        lines += ["", "## Harness wall time (the loop's cost per experiment)", "",
                  f"{args.repeats} more calls per kernel at the primary bench shape, baseline "
                  "cache warm (as inside a run). Target: median <= "
                  f"{TARGET_SECONDS:.0f} s.", "",
                  "| kernel | median s | min s | max s | worker phases of the median call (s) |",
                  "|---|---|---|---|---|"]
        for kernel_type, runs in speed.items():
            seconds = sorted(r.harness_seconds for r in runs)
            middle = statistics.median(seconds)
            median_run = min(runs, key=lambda r: abs(r.harness_seconds - middle))
            phases = ", ".join(f"{k} {v:.2f}" for k, v in median_run.phase_seconds.items())
            lines.append(f"| {kernel_type} | {middle:.2f} | {seconds[0]:.2f} | "
                         f"{seconds[-1]:.2f} | {phases} |")
            ok &= all(r.passed for r in runs)
            if args.device == "cuda":
                ok &= middle <= TARGET_SECONDS

    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = {k: r.to_dict() for k, r in results.items()}
    raw["_speed"] = {k: [r.to_dict() for r in runs] for k, runs in speed.items()}
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")
    print(text)
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
