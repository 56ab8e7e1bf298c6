"""Measured ceilings of this GPU: what a plain copy and cuBLAS actually reach, cached per card.

Datasheet peaks are never reached (an H100 SXM copies at ~90% of 3352 GB/s and runs an 8192^3
bf16 GEMM at ~80% of 989 TFLOP/s), so "% of peak" is reported twice: against the datasheet and
against these measured ceilings.

- Bandwidth: a device-to-device copy of 1 GiB, counting bytes read plus bytes written.
- Compute: a bf16 8192 x 8192 x 8192 `torch.matmul` on random normal data (zeros would let the
  hardware idle its multipliers and read high), 2*M*N*K flops.

Each is the fastest of `rounds` short rounds, a round being the median of `repeats` runs timed
with CUDA events, with a rest between rounds. Why not one long median: the power limit pulls a
sustained GEMM down hard (an H200 read 711-798 TFLOP/s over six back-to-back calls of 35 runs, 603
after 300 runs), while the harness times short bursts with idle gaps. The rested best round
measures that burst state and repeats closely from call to call (796-798 over four calls).

Other dtypes are scaled from the bf16 ceiling by the datasheet ratio (`measured_tflops`): an fp16
kernel on an H100 is held to measured_bf16 * 989.4/989.4, an fp32 (ieee, non-tensor) kernel to
measured_bf16 * 66.9/989.4. That assumes the same fraction of peak is reachable in every dtype,
which is the best a single GEMM can say.

The cache is `${AUTOKERNEL_CACHE_DIR:-~/.cache/autokernel}/ceilings.json`, keyed by GPU name,
total memory and the torch and CUDA/HIP versions (a driver or library change can move the
ceilings), and written atomically (temporary file + rename) so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from autokernel.backends.interface import cache_dir
from autokernel.files import atomic_write_text
from autokernel.gpu.database import GPUSpec, peak_tflops

CACHE_FILE = "ceilings.json"
COPY_BYTES = 1 << 30
GEMM_SIZE = 8192
WARMUP = 3
REPEATS = 10
ROUNDS = 5
REST_S = 0.5


@dataclass(frozen=True)
class Ceilings:
    gbps: float
    bf16_tflops: float
    measured_at: str  # ISO-8601, UTC
    gpu_name: str
    method: str


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def ceilings_key(device_index: int = 0) -> str:
    props = torch.cuda.get_device_properties(device_index)
    runtime = f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
    return f"{props.name} | {props.total_memory} B | torch {torch.__version__} | {runtime}"


def read_cache(path: Path | None = None) -> dict[str, Ceilings]:
    """Every cached entry; an unreadable or foreign file counts as empty (it is re-measured)."""
    path = path or cache_path()
    try:
        raw = json.loads(path.read_text())
        return {key: Ceilings(**entry) for key, entry in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write_cache(entries: dict[str, Ceilings], path: Path | None = None) -> None:
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({k: asdict(v) for k, v in entries.items()}, indent=2, sort_keys=True)
    atomic_write_text(path, text + "\n")


def _best_round_ms(run: Callable[[], object], warmup: int, repeats: int, rounds: int,
                   rest_s: float) -> float:
    """The fastest round's median wall time of `run()` on the GPU, in milliseconds."""
    medians = []
    for round_index in range(rounds):
        if round_index:
            time.sleep(rest_s)  # let clocks recover from the power limit
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        medians.append(statistics.median(times))
    return min(medians)


def measure_copy_gbps(device_index: int = 0, nbytes: int = COPY_BYTES, warmup: int = WARMUP,
                      repeats: int = REPEATS, rounds: int = ROUNDS,
                      rest_s: float = REST_S) -> float:
    device = torch.device("cuda", device_index)
    generator = torch.Generator(device=device).manual_seed(0)
    src = torch.rand(nbytes // 4, device=device, generator=generator)
    dst = torch.empty_like(src)
    ms = _best_round_ms(lambda: dst.copy_(src), warmup, repeats, rounds, rest_s)
    if not torch.equal(dst, src):
        raise RuntimeError("calibration copy produced wrong data")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def measure_gemm_tflops(device_index: int = 0, size: int = GEMM_SIZE, warmup: int = WARMUP,
                        repeats: int = REPEATS, rounds: int = ROUNDS,
                        rest_s: float = REST_S) -> float:
    device = torch.device("cuda", device_index)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    out = torch.empty(size, size, device=device, dtype=torch.bfloat16)
    ms = _best_round_ms(lambda: torch.matmul(a, b, out=out), warmup, repeats, rounds, rest_s)
    if not torch.isfinite(out).all() or out.abs().max() == 0:
        raise RuntimeError("calibration GEMM produced non-finite or all-zero output")
    return 2 * size**3 / (ms * 1e-3) / 1e12


def measure_ceilings(device_index: int = 0) -> Ceilings:
    with torch.cuda.device(device_index):
        gbps = measure_copy_gbps(device_index)
        tflops = measure_gemm_tflops(device_index)
        torch.cuda.empty_cache()
    return Ceilings(
        gbps=gbps,
        bf16_tflops=tflops,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        gpu_name=torch.cuda.get_device_name(device_index),
        method=(f"fastest of {ROUNDS} rounds {REST_S:g} s apart, each the median of {REPEATS} "
                f"CUDA-event-timed runs after {WARMUP} warm-up: {COPY_BYTES >> 30} GiB device "
                f"copy (read+write bytes); bf16 matmul {GEMM_SIZE}^3, random normal"),
    )


def get_ceilings(device_index: int = 0, recalibrate: bool = False,
                 allow_measure: bool = True) -> Ceilings | None:
    """Cached ceilings for this GPU; measured (and cached) when missing or when `recalibrate`.

    None without a GPU, or when nothing is cached and `allow_measure` is False.
    """
    if not torch.cuda.is_available():
        return None
    key = ceilings_key(device_index)
    entries = read_cache()
    if key in entries and not recalibrate:
        return entries[key]
    if not allow_measure:
        return None
    ceilings = measure_ceilings(device_index)
    entries = read_cache()  # another process may have written meanwhile; keep its entries
    entries[key] = ceilings
    write_cache(entries)
    return ceilings


def cached_ceilings_for(gpu_name: str, path: Path | None = None) -> Ceilings | None:
    """The newest cached ceilings of a GPU of this name measured under this torch, without
    touching CUDA (the loop's own process never initialises the GPU; its workers do)."""
    this_torch = f"| torch {torch.__version__} |"
    matches = [c for key, c in read_cache(path).items()
               if c.gpu_name == gpu_name and this_torch in key]
    return max(matches, key=lambda c: c.measured_at) if matches else None


def measured_tflops(ceilings: Ceilings, spec: GPUSpec | None, dtype: torch.dtype) -> float | None:
    """The measured compute ceiling for `dtype`: bf16 as measured, others by datasheet ratio."""
    if dtype == torch.bfloat16:
        return ceilings.bf16_tflops
    if spec is None:
        return None
    return ceilings.bf16_tflops * peak_tflops(spec, dtype) / spec.bf16_tflops
