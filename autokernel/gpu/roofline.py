"""The one place that turns a timing into throughput and "% of peak".

The roofline floor of an op at a shape is the time it could not beat on this GPU:

    floor = max(flops / peak_flops(dtype), bytes / peak_bandwidth)

with `flops` and `bytes` from the op's registry entry (minimum traffic: each input read once,
each output written once). `pct_peak = floor / latency * 100`: 100% means the kernel runs at the
roofline, whichever of compute or memory binds. It is computed twice, against the datasheet
(`autokernel.gpu.database`) and against the measured ceilings (`autokernel.gpu.calibrate`).

The harness, the loop's ">= 90% of peak" rule and the report all call `roofline()`, so the
number means the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from autokernel.gpu.calibrate import Ceilings, measured_tflops
from autokernel.gpu.database import GPUSpec, peak_tflops
from autokernel.ops.spec import OpSpec, Shape


@dataclass(frozen=True)
class Roofline:
    flops: float
    bytes: float
    latency_us: float
    tflops: float
    gbps: float
    throughput: float
    """tflops for compute-bound op types, gbps otherwise (the op's natural unit)."""
    throughput_unit: str  # "TFLOP/s" or "GB/s"
    floor_us_datasheet: float | None = None
    floor_us_measured: float | None = None
    pct_peak_datasheet: float | None = None
    pct_peak_measured: float | None = None
    bound: str | None = None
    """"compute" or "memory": which term sets the datasheet floor at this shape."""


def floor_us(flops: float, nbytes: float, tflops_peak: float | None,
             gbps_peak: float | None) -> float | None:
    """max(compute time, memory time) in microseconds; None if either peak is unknown."""
    if not tflops_peak or not gbps_peak:
        return None
    return max(flops / (tflops_peak * 1e12), nbytes / (gbps_peak * 1e9)) * 1e6


def roofline(
    spec: OpSpec,
    shape: Shape,
    dtype: torch.dtype,
    latency_us: float,
    gpu: GPUSpec | None,
    ceilings: Ceilings | None = None,
) -> Roofline:
    """Throughput and % of peak of one timed run.

    `pct_peak_datasheet` is None without a GPU spec (the CPU interpreter); `pct_peak_measured`
    is None without ceilings (and, for dtypes other than bf16, without a spec to scale by).
    """
    if not latency_us > 0:
        raise ValueError(f"latency must be positive, got {latency_us} µs")
    flops = float(spec.flops(shape))
    nbytes = float(spec.bytes(shape, dtype))
    seconds = latency_us * 1e-6
    tflops = flops / seconds / 1e12
    gbps = nbytes / seconds / 1e9
    unit = "TFLOP/s" if spec.compute_bound else "GB/s"
    result = Roofline(flops=flops, bytes=nbytes, latency_us=latency_us, tflops=tflops,
                      gbps=gbps, throughput=tflops if spec.compute_bound else gbps,
                      throughput_unit=unit)
    def pct(floor: float | None) -> float | None:
        return floor / latency_us * 100 if floor is not None else None

    floor_meas = None
    if ceilings is not None:
        floor_meas = floor_us(flops, nbytes, measured_tflops(ceilings, gpu, dtype), ceilings.gbps)
    result = replace(result, floor_us_measured=floor_meas, pct_peak_measured=pct(floor_meas))
    if gpu is None:
        return result

    peak = peak_tflops(gpu, dtype)
    floor_ds = floor_us(flops, nbytes, peak, gpu.gbps)
    compute_s, memory_s = flops / (peak * 1e12), nbytes / (gpu.gbps * 1e9)
    return replace(result, floor_us_datasheet=floor_ds, pct_peak_datasheet=pct(floor_ds),
                   bound="compute" if compute_s >= memory_s else "memory")
