"""Is a large kernel's time a matter of the GPU's clock regime? Time one starter three ways at one
shape, and read the SM clock and board power while each runs.

    python scripts/gpu_clock_regime.py fused_mlp 4096x4096x14336 [--out DIR]

- sustained: `triton.testing.do_bench` (back to back for ~200 ms, as the agreement check runs it);
- rested: one call at a time after the GPU idled `--rest-ms`, L2 flushed, CUDA events around it;
- harness: `run_bench` on the starter at that shape (fresh inputs, flush, batches behind a spin).

The same for the op's eager function in the first two. nvidia-smi samples the clock every 20 ms in
the background; each phase reports the median clock and power of the samples taken during it.
If the rested and harness figures agree with each other and differ from sustained, and the clock
differs with them, the gap between the harness and do_bench is the clock, not the protocol.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ClockLog:
    """nvidia-smi's SM clock (MHz) and power (W), stamped with this process's monotonic time."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "20"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                clock, power = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), clock, power))

    def window(self, began: float, ended: float) -> str:
        inside = [(c, p) for t, c, p in self.samples if began <= t <= ended]
        if not inside:
            return "no samples"
        return (f"{statistics.median(c for c, _ in inside):.0f} MHz, "
                f"{statistics.median(p for _, p in inside):.0f} W ({len(inside)} samples)")

    def close(self) -> None:
        self.process.terminate()


def rested_us(fn: Callable[[], Any], flush: Any, rest_ms: float, calls: int) -> float:
    import torch

    times = []
    for _ in range(calls):
        time.sleep(rest_ms / 1e3)
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel_type")
    parser.add_argument("shape")
    parser.add_argument("--rest-ms", type=float, default=100.0)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from triton.testing import do_bench

    from autokernel.harness.runner import run_bench
    from autokernel.kernels import starter_path
    from autokernel.ops import get_spec

    if shutil.which("nvidia-smi") is None or not torch.cuda.is_available():
        print("needs a CUDA GPU and nvidia-smi", file=sys.stderr)
        return 2
    spec = get_spec(args.kernel_type)
    shape = spec.parse_shape(args.shape)
    loader = importlib.util.spec_from_file_location("starter", starter_path(args.kernel_type))
    starter = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(starter)
    generator = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, torch.float16, torch.device("cuda"), generator, "normal")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    log = ClockLog()
    time.sleep(1.0)
    rows = []
    for name, call in (("starter", starter.kernel_fn), ("eager", spec.stock)):
        def fn(call: Callable[..., Any] = call) -> Any:
            return call(*inputs)

        fn()
        torch.cuda.synchronize()
        began = time.monotonic()
        sustained = do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        mid = time.monotonic()
        rested = rested_us(fn, flush, args.rest_ms, args.calls)
        ended = time.monotonic()
        rows.append(f"| {name} | sustained (do_bench) | {sustained:.1f} | "
                    f"{log.window(began, mid)} |")
        rows.append(f"| {name} | rested {args.rest_ms:.0f} ms | {rested:.1f} | "
                    f"{log.window(mid, ended)} |")
    inputs = ()
    torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as scratch:
        began = time.monotonic()
        result = run_bench(starter_path(args.kernel_type), device="cuda", shapes=[args.shape],
                           dtypes=["fp16"], correctness_dtypes=["fp16"], quick=True,
                           cache_dir=Path(scratch), timeout_s=600)
        ended = time.monotonic()
    log.close()
    if result.passed:
        timing = result.timings[0]
        rows.append(f"| starter | harness | {timing.latency_us:.1f} | {log.window(began, ended)} "
                    f"(whole bench) |")
        rows.append(f"| eager | harness | {timing.eager_us:.1f} | |")
    else:
        rows.append(f"| starter | harness | {result.status.value}: {result.reason[:120]} | |")
    gpu = torch.cuda.get_device_name(0)
    lines = [f"# Clock regime: {args.kernel_type} {args.shape} fp16 on {gpu}", "",
             "| kernel | protocol | µs (median) | SM clock, power |", "|---|---|---|---|", *rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"clock-regime-{args.kernel_type}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
