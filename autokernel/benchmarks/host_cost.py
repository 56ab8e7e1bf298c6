"""Host launch cost of the Triton starters against eager PyTorch, at a small and a medium shape.

    python -m autokernel.benchmarks host-cost [--git-rev REV] [--ops rmsnorm softmax ...]

For each starter in autokernel/kernels (fp16), and for the op's stock eager PyTorch path:

- host_us: median wall time from calling kernel_fn until it returns, with the GPU kept busy by a
  spin kernel queued first, so every launch only enqueues and the launch queue never blocks (the
  cost a model pays per call when its host runs ahead of the GPU);
- sync_us: median wall time of one call bracketed by torch.cuda.synchronize (eager mode with the
  host behind: what decides speed at small sizes);
- device_us: triton.testing.do_bench's median (L2 cleared before each call).

`--git-rev REV` also measures the starters as they were at commit REV (each file read with
`git show REV:autokernel/kernels/<op>.py` and imported from a temporary file), in the same
process, so before and after are compared on the same machine state. Outputs of each contestant
are checked against the op's upcast reference at its fp16 tolerance (`ok` column).

Needs a CUDA GPU; about a minute for the nine starters (most of it Triton compiling on first use).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import triton
import triton.testing

from autokernel.benchmarks.record import REPO
from autokernel.benchmarks.starters import load_file_as_module, starter_source_at
from autokernel.ops import KERNEL_TYPES, get_spec
from autokernel.ops.spec import OpSpec
from autokernel.versions import source_commit

DTYPE = torch.float16
# (small, medium) per op, by dim name (a dim the op's spec lacks is dropped; one it has and this
# table lacks is 1). Small: a decode step's sizes; medium: where host cost and device time meet.
SHAPES: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "softmax": ({"M": 32, "N": 1024}, {"M": 2048, "N": 2048}),
    "layernorm": ({"M": 32, "N": 1024}, {"M": 2048, "N": 2048}),
    "rmsnorm": ({"M": 32, "N": 1024}, {"M": 2048, "N": 2048}),
    "reduce": ({"M": 32, "N": 1024}, {"M": 2048, "N": 2048}),
    "cross_entropy": ({"M": 16, "V": 32000}, {"M": 1024, "V": 32000}),
    "rotary_embedding": ({"B": 1, "H": 32, "S": 16, "D": 128}, {"B": 1, "H": 32, "S": 1024,
                                                                 "D": 128}),
    "matmul": ({"M": 16, "N": 4096, "K": 4096}, {"M": 1024, "N": 1024, "K": 1024}),
    "fused_mlp": ({"M": 16, "D": 2048, "H": 5632}, {"M": 512, "D": 2048, "H": 5632}),
    "flash_attention": ({"B": 1, "H": 16, "S": 128, "D": 64}, {"B": 1, "H": 16, "S": 1024,
                                                               "D": 128}),
}
HOST_CALLS = 50  # per spin: queued behind it, timed one by one
HOST_BATCHES = 4
SYNC_CALLS = 50
SPIN_MS = 40.0  # longer than a batch's host time, so the GPU is still busy at its end
DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS = 10, 50

Call = Callable[[], Any]


def shape_for(spec: OpSpec, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes.get(dim, 1) for dim in spec.dims)


def starter_at(rev: str, kernel_type: str, directory: Path) -> ModuleType | None:
    """The starter as committed at `rev`, imported from a file under `directory`; None if the
    file did not exist there."""
    source = starter_source_at(rev, kernel_type)
    if source is None:
        return None
    tag = re.sub(r"\W", "_", rev)
    path = directory / f"{kernel_type}_at_{tag}.py"
    path.write_text(source)
    return load_file_as_module(path, path.stem)


class Spinner:
    """Holds the GPU for a given time (torch.cuda._sleep, calibrated once)."""

    def __init__(self) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        torch.cuda._sleep(cycles // 10)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        self.cycles_per_ms = cycles / start.elapsed_time(end)

    def hold(self, ms: float) -> torch.cuda.Event:
        """Queue a spin of `ms`; the returned event completes when it ends."""
        torch.cuda._sleep(int(ms * self.cycles_per_ms))
        done = torch.cuda.Event()
        done.record()
        return done


def host_us(call: Call, spinner: Spinner) -> tuple[float, bool]:
    """Median time for `call` to return while the GPU is busy; and whether the GPU was still
    busy at the end of every batch (if not, the spin was too short and some calls may have
    waited on nothing — still host time, but say so)."""
    times: list[float] = []
    always_busy = True
    for _ in range(HOST_BATCHES):
        torch.cuda.synchronize()
        spin_end = spinner.hold(SPIN_MS)
        for _ in range(HOST_CALLS):
            began = time.perf_counter()
            call()
            times.append((time.perf_counter() - began) * 1e6)
        always_busy &= not spin_end.query()
    torch.cuda.synchronize()
    return statistics.median(times), always_busy


def sync_us(call: Call) -> float:
    times = []
    for _ in range(SYNC_CALLS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - began) * 1e6)
    return statistics.median(times)


def device_us(call: Call) -> float:
    return 1e3 * triton.testing.do_bench(call, warmup=DO_BENCH_WARMUP_MS, rep=DO_BENCH_REP_MS,
                                         return_mode="median")


def matches_reference(spec: OpSpec, out: torch.Tensor, args: tuple[Any, ...]) -> bool:
    upcast = tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                   for a in args)
    expected = spec.reference(*upcast)
    tol = spec.tolerance(DTYPE)
    if out.shape != expected.shape:
        return False
    return bool(torch.allclose(out.float(), expected.float(), atol=tol.atol, rtol=tol.rtol))


def measure(spec: OpSpec, fn: Callable[..., Any], args: tuple[Any, ...], spinner: Spinner
            ) -> dict[str, Any]:
    def call() -> Any:
        return fn(*args)

    out = call()  # compiles on first use
    torch.cuda.synchronize()
    ok = matches_reference(spec, out, args)
    host, busy = host_us(call, spinner)
    return {"host_us": host, "spin_held": busy, "sync_us": sync_us(call),
            "device_us": device_us(call), "ok": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-rev", help="also measure the starters as committed at REV")
    parser.add_argument("--ops", nargs="+", default=list(KERNEL_TYPES), choices=KERNEL_TYPES)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2

    spinner = Spinner()
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_host_cost_") as tmp:
        for kernel_type in args.ops:
            spec = get_spec(kernel_type)
            contestants: list[tuple[str, Callable[..., Any]]] = [
                ("starter", importlib.import_module(f"autokernel.kernels.{kernel_type}").kernel_fn)]
            if args.git_rev:
                old = starter_at(args.git_rev, kernel_type, Path(tmp))
                if old is not None:
                    contestants.append((f"starter@{args.git_rev}", old.kernel_fn))
            contestants.append(("eager", spec.stock))
            for sizes in SHAPES[kernel_type]:
                shape = shape_for(spec, sizes)
                inputs = spec.make_inputs(shape, DTYPE, "cuda",
                                          torch.Generator(device="cuda").manual_seed(0))
                label = "x".join(map(str, shape))
                for name, fn in contestants:
                    # One broken contestant must not end the table.
                    try:
                        result = measure(spec, fn, inputs, spinner)
                    except Exception as exc:  # noqa: BLE001
                        result = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
                    rows.append((kernel_type, label, name, result))
                    print(f"{kernel_type:17s} {label:18s} {name:18s} {result}", flush=True)
                del inputs
                torch.cuda.empty_cache()

    print(f"\nHost cost of the starters, fp16, {torch.cuda.get_device_name()}, "
          f"code {source_commit(REPO)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.monotonic() - started:.0f} s")
    print("host_us: until kernel_fn returns, GPU busy | sync_us: one synchronized call | "
          "device_us: do_bench median")
    header = f"{'op':17s} {'shape':18s} {'contestant':18s} {'host_us':>8s} {'sync_us':>8s} " \
             f"{'device_us':>9s}  ok"
    print(header)
    print("-" * len(header))
    for kernel_type, label, name, r in rows:
        if "error" in r:
            print(f"{kernel_type:17s} {label:18s} {name:18s} {r['error']}")
            continue
        held = "" if r["spin_held"] else " (spin too short)"
        print(f"{kernel_type:17s} {label:18s} {name:18s} {r['host_us']:8.1f} {r['sync_us']:8.1f} "
              f"{r['device_us']:9.1f}  {'yes' if r['ok'] else 'NO'}{held}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
