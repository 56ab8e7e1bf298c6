"""Does the harness's timing hold up? Agreement with do_bench, and A/A and A/B keep rates.

    python -m autokernel.benchmarks timing-check agreement [--kernels rmsnorm softmax ...] --out DIR
    python -m autokernel.benchmarks timing-check keep-rates --out DIR [--trials 40] [--configs ...]

`agreement`: every starter at two medium shapes and one large one, fp16. The harness
(`run_bench`, a fresh worker, quick correctness in fp16, timing as in a run) reports device-time
medians and IQRs; beside them, in this process, `triton.testing.do_bench` (median, L2 cleared
before each call) of the same starter and of eager PyTorch at the same shape, and the wall time of
one synchronized call. Pass: the harness within 10% of do_bench, its IQR at most 5% of its median.

`keep-rates`: the keep rule against a known truth. A candidate is timed against an incumbent
`--trials` times, each trial one `run_bench` with `incumbent=` (a fresh worker: the judge times
the candidate and the incumbent, each in a sandboxed process of its own, in interleaved batches
bounded by its clock; the smoke case only for correctness; the compile baseline cached as in a
run's later experiments), then the loop's keep rule (`autokernel.loop.keep.verdict_for`). Pairs:
the rmsnorm starter against itself (A/A: should almost never be kept) and against copies of
itself that also read a fraction of x in an extra kernel (A/B: kept at the rate reported; the
true ratio is do_bench's, measured in this process). A trial costs a worker's start, both
processes' setup and compile, and the timing: seconds each on a GPU.

Both write `<mode>.json` and `<mode>.md` under --out and print the markdown last. `--device cpu`
runs the same code on the interpreter with tiny shapes (a smoke test; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autokernel.benchmarks.record import REPO
from autokernel.versions import source_commit

AGREEMENT_TOLERANCE = 0.10
IQR_LIMIT = 0.05
ROW = ("2048x2048", "3136x3072", "8192x8192")
SHAPES: dict[str, tuple[str, str, str]] = {  # two medium, one large (fp16)
    "softmax": ROW, "layernorm": ROW, "rmsnorm": ROW,
    "reduce": ("2048x2048", "3136x3072", "16384x8192"),
    "cross_entropy": ("1024x32000", "2048x32000", "8192x50257"),
    "rotary_embedding": ("1x16x1024x128", "2x16x2048x128", "1x32x4096x128"),
    "matmul": ("1x1024x1024x1024", "1x2048x2048x2048", "1x8192x8192x8192"),
    "fused_mlp": ("512x2048x5632", "2048x2048x5632", "4096x4096x14336"),
    "flash_attention": ("1x16x1024x128", "2x16x2048x128", "1x32x4096x128"),
}
CPU_SHAPES = {"rmsnorm": ("16x64", "8x128", "32x64"), "softmax": ("16x64", "8x128", "32x64")}
# name -> (extra fraction of x the incumbent reads, shape, pair). Pair "starter": the rmsnorm
# starter against itself plus an extra kernel reading that fraction of x (a second launch adds a
# fixed ~2 µs, so short kernels come out slower than the fraction says). Pair "inline": a plain
# one-row-per-program rmsnorm against a copy that reads the extra fraction in the same launch,
# from a scratch buffer: traffic (2 + f) / 2 of the plain one.
KEEP_CONFIGS: dict[str, tuple[float, str, str]] = {
    "aa-medium": (0.0, "2048x2048", "starter"),
    "aa-large": (0.0, "8192x8192", "starter"),
    "ab110-medium": (0.24, "2048x2048", "starter"),
    "ab110-large": (0.24, "8192x8192", "starter"),
    "ab103-large": (0.07, "8192x8192", "starter"),
    "ab103-medium": (0.07, "2048x2048", "starter"),
    "inline-medium-10": (0.2, "2048x2048", "inline"),
    "inline-large-10": (0.2, "8192x8192", "inline"),
    "inline-large-03": (0.06, "8192x8192", "inline"),
    "inline-medium-03": (0.06, "2048x2048", "inline"),
}
SLOWER_SUFFIX = """

@triton.jit
def _extra_read_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(values, axis=0))


_starter_kernel_fn = kernel_fn


def kernel_fn(x, weight, eps=1e-6):
    n = int(x.numel() * EXTRA_READ_FRACTION)
    if n > 0:
        partial = torch.empty(triton.cdiv(n, 4096), dtype=torch.float32, device=x.device)
        _extra_read_kernel[(triton.cdiv(n, 4096),)](x, partial, n, BLOCK=4096)
    return _starter_kernel_fn(x, weight, eps)
"""
INLINE_RMSNORM = """import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"
EXTRA_READ_FRACTION = {fraction}


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, y_ptr, shadow_ptr, partial_ptr, n_cols, extra_cols, eps,
                 BLOCK: tl.constexpr, EXTRA: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32) * w,
             mask=mask)
    if EXTRA:
        s = tl.load(shadow_ptr + row * n_cols + cols, mask=cols < extra_cols, other=0.0)
        tl.store(partial_ptr + row, tl.sum(s.to(tl.float32), axis=0))


def kernel_fn(x, weight, eps=1e-6):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    y = torch.empty_like(x2)
    extra = int(n * EXTRA_READ_FRACTION)
    shadow = torch.empty_like(x2) if extra else x2
    partial = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
    _rmsnorm_row[(x2.shape[0],)](x2, weight, y, shadow, partial, n, extra, eps,
                                 BLOCK=triton.next_power_of_2(n), EXTRA=extra > 0, num_warps=8)
    return y.view(x.shape)
"""


def header(title: str, device: str, command: str) -> list[str]:
    import torch
    import triton

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (Triton interpreter)"
    return [f"# {title}", "", f"- GPU: **{gpu}**",
            f"- torch {torch.__version__}, triton {triton.__version__}, Python "
            f"{sys.version.split()[0]}",
            f"- autokernel commit: `{source_commit(REPO)}`",
            f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- command: `{command}`", ""]


def load_module(path: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synced_wall_us(fn: Any, calls: int = 30) -> float:
    import torch

    walls = []
    for _ in range(calls):
        torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - began) * 1e6)
    return statistics.median(walls)


def agreement(args: argparse.Namespace) -> int:
    import torch
    from triton.testing import do_bench

    from autokernel.harness.runner import run_bench
    from autokernel.kernels import starter_path
    from autokernel.ops import get_spec

    table = CPU_SHAPES if args.device == "cpu" else SHAPES
    kernels = args.kernels or list(table)
    dtype = "fp16" if args.device == "cuda" else "fp32"
    rows, raw, ok = [], {}, True
    with tempfile.TemporaryDirectory(prefix="autokernel-agree-") as scratch:
        cache = Path(scratch) / "cache"
        for kernel_type in kernels:
            spec = get_spec(kernel_type)
            shapes = list(table[kernel_type])
            _skip_compile_baselines(cache, kernel_type, [spec.parse_shape(t) for t in shapes],
                                    dtype, args.device)
            began = time.perf_counter()
            result = run_bench(starter_path(kernel_type), device=args.device, shapes=shapes,
                               dtypes=[dtype], correctness_dtypes=[dtype], quick=True,
                               cache_dir=cache, timeout_s=900)
            wall = time.perf_counter() - began
            raw[kernel_type] = result.to_dict()
            print(f"{kernel_type}: {result.status.value} in {wall:.1f} s {result.reason[:200]}",
                  file=sys.stderr, flush=True)
            if not result.passed:
                ok = False
                rows.append(f"| {kernel_type} | {result.status.value} | | | | | | | | |")
                continue
            module = load_module(starter_path(kernel_type), f"starter_{kernel_type}")
            for timing in result.timings:
                shape = tuple(timing.shape)
                if args.device == "cuda":
                    generator = torch.Generator(device="cuda").manual_seed(0)
                    inputs = spec.make_inputs(shape, torch.float16, torch.device("cuda"),
                                              generator, "normal")
                    q25, ours, q75 = (v * 1e3 for v in do_bench(
                        lambda: module.kernel_fn(*inputs), warmup=25, rep=200,
                        quantiles=[0.25, 0.5, 0.75]))
                    do_bench_spread = (q75 - q25) / ours
                    eager = do_bench(lambda: spec.stock(*inputs), warmup=25, rep=200,
                                     return_mode="median") * 1e3
                    synced = synced_wall_us(lambda: module.kernel_fn(*inputs))
                    del inputs
                    torch.cuda.empty_cache()
                else:
                    ours = eager = synced = do_bench_spread = float("nan")
                agree = abs(timing.latency_us / ours - 1) if ours == ours else float("nan")
                spread = timing.iqr_us / timing.latency_us
                passed = agree <= AGREEMENT_TOLERANCE and spread <= IQR_LIMIT
                ok &= passed or args.device != "cuda"
                rows.append(
                    f"| {kernel_type} | {spec.format_shape(shape)} | {timing.latency_us:.2f} | "
                    f"{spread:.1%} (×{timing.calls_per_round}) | {ours:.2f} | "
                    f"{do_bench_spread:.1%} | {timing.latency_us / ours:.3f} | "
                    f"{timing.eager_us:.2f} | {eager:.2f} | {synced:.1f} | "
                    f"{_num(timing.launch_us)} / {_num(timing.eager_launch_us)} | "
                    f"{'yes' if passed else '**no**'} |")
            write(args.out, "agreement", agreement_lines(args.device, rows), raw, quiet=True)
    write(args.out, "agreement", agreement_lines(args.device, rows), raw)
    return 0 if ok else 1


def _skip_compile_baselines(cache: Path, kernel_type: str, shapes: list[tuple[int, ...]],
                            dtype: str, device: str) -> None:
    """Seed the harness's baseline cache so it does not compile torch.compile baselines this
    comparison does not use (cross_entropy's take minutes)."""
    import torch

    from autokernel.harness.protocol import baseline_key
    from autokernel.harness.runner import write_baseline_cache

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    write_baseline_cache(cache, {baseline_key(kernel_type, list(s), dtype, gpu, torch.__version__,
                                              {}): {"compile_us": None} for s in shapes})


def agreement_lines(device: str, rows: list[str]) -> list[str]:
    lines = header("Harness device time against triton.testing.do_bench", device,
                   "python -m autokernel.benchmarks timing-check agreement")
    lines += [
        "Harness: `run_bench` on each starter (fresh worker; quick correctness in fp16), timing "
        "as in a run: fresh inputs per call, L2 flushed (256 MiB), batches queued behind a GPU "
        "spin so the host stays ahead, CUDA events, rotating order; median and IQR over the "
        "rounds. do_bench: `triton.testing.do_bench(fn, warmup=25, rep=200, "
        "return_mode='median')` in this process on one fixed input (it clears L2 before every "
        "call). Synced call: median wall time of one call bracketed by `torch.cuda.synchronize()` "
        "(host launch included). launch: the harness's host launch cost (synced wall minus "
        "device time), kernel / eager.",
        "",
        f"Pass: harness median within {AGREEMENT_TOLERANCE:.0%} of do_bench and IQR at most "
        f"{IQR_LIMIT:.0%} of the median.",
        "",
        "IQR/median (×N): the harness's interquartile range over rounds, each round the mean of "
        "N calls; do_bench IQR: over its single calls.",
        "",
        "| kernel | shape | harness µs | IQR/median (×N) | do_bench µs | do_bench IQR | "
        "harness/do_bench | harness eager µs | do_bench eager µs | synced call µs | "
        "launch µs kernel / eager | pass |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def keep_rates(args: argparse.Namespace) -> int:
    configs = args.configs or list(KEEP_CONFIGS)
    results: dict[str, Any] = {}
    for name in configs:
        began = time.perf_counter()
        try:
            results[name] = trials_of(name, args)
        except Exception as exc:  # one configuration's failure costs its row, not the others
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{name}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        write(args.out, "keep-rates", keep_rate_lines(args, results), results, quiet=True)
    write(args.out, "keep-rates", keep_rate_lines(args, results), results)
    return 0


def keep_rate_lines(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    lines = header("Keep rule against a known truth: A/A and A/B keep rates", args.device,
                   "python -m autokernel.benchmarks timing-check keep-rates --trials "
                   f"{args.trials}")
    lines += [
        "Each trial: one `run_bench` of the candidate with the incumbent timed alongside (the "
        "judge times each in its own sandboxed process: guards on every call, fresh inputs "
        "every call, L2 flush, batches behind a GPU spin bounded by the judge's clock, outputs "
        "sampled and compared in full, untimed synced calls for launch cost; 1 s budget; the "
        "compile baseline cached as in a run's later experiments; the smoke case only for "
        "correctness), then `autokernel.loop.keep.verdict_for` decides with "
        "min_gain 1%, fp16. Pairs: `starter` is the rmsnorm starter against itself (A/A) or "
        "against itself plus an extra kernel reading a fraction of x; `inline` is a plain "
        "one-row-per-program rmsnorm against a copy reading the extra fraction inside the same "
        "launch. True ratio: do_bench (median) of incumbent / candidate in the same process.",
        "",
        "| config | pair | shape | extra read | do_bench ratio | trials | kept | keep rate | "
        "median vs_best | median CI width | re-timed | median rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, data in results.items():
        if "error" in data:
            lines.append(f"| {name} | error: {data['error'][-200:]!r} |")
            continue
        trials = data["trials"]
        kept = sum(t["status"] == "keep" for t in trials)
        judged = [t for t in trials if t["estimate"] is not None] or [
            {"estimate": float("nan"), "width": float("nan"), "rounds": 0}]
        other = sorted({t["status"] for t in trials} - {"keep", "revert"})
        lines.append(
            f"| {name} | {data.get('pair', 'starter')} | {data['shape']} | "
            f"{data['fraction']:.2f} | "
            f"{data['do_bench_ratio']:.3f} | {len(trials)} | {kept} | {kept / len(trials):.0%} | "
            f"{statistics.median(t['estimate'] for t in judged):.3f} | "
            f"{statistics.median(t['width'] for t in judged):.3f} | "
            f"{sum(t['retimed'] for t in trials)} | "
            f"{statistics.median(t['rounds'] for t in judged):.0f} |"
            + (f" other verdicts: {', '.join(other)}" if other else ""))
    return lines


def trials_of(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: `args.trials` benches of the candidate with the incumbent timed
    alongside (each a fresh worker: the judge times both in processes of their own), each then
    judged by the loop's keep rule."""
    import torch

    from autokernel.harness.runner import run_bench
    from autokernel.kernels import starter_path
    from autokernel.loop.keep import verdict_for
    from autokernel.loop.measure import measure
    from autokernel.loop.state import Measurement
    from autokernel.ops import get_spec

    fraction, shape_text, pair = KEEP_CONFIGS[config]
    cpu = args.device == "cpu"
    shape_text = "32x64" if cpu else shape_text
    dtype = "fp32" if cpu else "fp16"
    spec = get_spec("rmsnorm")
    shape = spec.parse_shape(shape_text)
    scratch = Path(tempfile.mkdtemp(prefix="autokernel-trial-"))
    candidate, incumbent = scratch / "candidate.py", scratch / "incumbent.py"
    if pair == "inline":
        candidate.write_text(INLINE_RMSNORM.format(fraction=0.0))
        incumbent.write_text(INLINE_RMSNORM.format(fraction=fraction))
    else:
        starter = starter_path("rmsnorm").read_text()
        candidate.write_text(starter)
        incumbent.write_text(starter + f"\nEXTRA_READ_FRACTION = {fraction}\n" + SLOWER_SUFFIX
                             if fraction else starter)
    cache = scratch / "cache"
    _skip_compile_baselines(cache, "rmsnorm", [shape], dtype, args.device)
    ratio = float("nan")
    if not cpu:
        from triton.testing import do_bench

        generator = torch.Generator(device="cuda").manual_seed(1)
        inputs = spec.make_inputs(shape, torch.float16, torch.device("cuda"), generator,
                                  "normal")
        modules = [load_module(path, f"trial_{path.stem}") for path in (candidate, incumbent)]
        times = [do_bench(lambda m=m: m.kernel_fn(*inputs), warmup=25, rep=300,
                          return_mode="median") for m in modules]
        ratio = times[1] / times[0]
        del inputs
        torch.cuda.empty_cache()
    weights = {tuple(shape): 1.0}
    best = Measurement(experiment=0, commit="incumbent", latency_us=1.0, iqr_us=0.0)
    trials = []
    for t in range(args.trials):
        # The smoke case only: correctness is not what is measured here (tests' only_stages).
        result = run_bench(candidate, device=args.device, shapes=[shape_text], dtypes=[dtype],
                           correctness_dtypes=[dtype], quick=True, cache_dir=cache,
                           incumbent=incumbent, only_stages=["smoke"], timeout_s=args.timeout)
        if not result.passed or not result.timings:
            trials.append({"status": result.status.value, "reason": result.reason,
                           "estimate": None, "low": None, "high": None, "width": None,
                           "rounds": 0, "retimed": False})
            continue
        timing = result.timings[0]
        verdict = verdict_for(result, measure(result, t + 1, "", weights), best, 0.01, weights)
        paired = verdict.vs_best
        trials.append({"status": verdict.status, "reason": verdict.reason,
                       "estimate": paired.estimate if paired else None,
                       "low": paired.low if paired else None,
                       "high": paired.high if paired else None,
                       "width": paired.relative_width if paired else None,
                       "rounds": timing.samples, "retimed": timing.retimed,
                       "candidate_us": timing.latency_us, "incumbent_us": timing.incumbent_us,
                       "calls_per_round": timing.calls_per_round,
                       "launch_us": timing.launch_us, "harness_s": result.harness_seconds,
                       "paired_ratios": timing.paired_ratios if t == 0 else None})
    return {"config": config, "shape": shape_text, "fraction": fraction, "pair": pair,
            "do_bench_ratio": ratio, "trials": trials}


def write(out: Path, name: str, lines: list[str], raw: Any, quiet: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    if not quiet:
        print(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("agreement", "keep-rates"))
    parser.add_argument("--out", type=Path, default=Path("gpu-out"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--kernels", nargs="*", default=None)
    parser.add_argument("--configs", nargs="*", default=None, choices=list(KEEP_CONFIGS))
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.mode == "agreement":
        return agreement(args)
    return keep_rates(args)


if __name__ == "__main__":
    sys.exit(main())
