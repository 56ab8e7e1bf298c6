"""Roofline arithmetic: throughput, floor time, % of datasheet and of measured peak."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from autokernel.gpu.calibrate import Ceilings, measured_tflops
from autokernel.gpu.database import GPUS_BY_KEY
from autokernel.gpu.roofline import floor_us, roofline
from autokernel.ops import KERNEL_TYPES, get_spec
from autokernel.ops.spec import OpSpec, element_size

H100 = GPUS_BY_KEY["h100-sxm"]
CEILINGS = Ceilings(gbps=3000.0, bf16_tflops=800.0, measured_at="2026-01-01T00:00:00+00:00",
                    gpu_name="NVIDIA H100 80GB HBM3", method="test")


def _unused(*args, **kwargs):
    raise AssertionError("roofline must not run the op")


def _op(compute_bound: bool) -> OpSpec:
    """A matmul-shaped op: 2*M*N*K flops, (M*K + K*N + M*N) elements of traffic."""
    return OpSpec(
        name="toy_matmul" if compute_bound else "toy_copy",
        dims=("M", "N", "K"),
        reference=_unused, stock=_unused, make_inputs=_unused,
        flops=lambda s: 2.0 * s[0] * s[1] * s[2],
        bytes=lambda s, dt: float(s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * element_size(dt),
        compute_bound=compute_bound,
        smoke_shape=(2, 2, 2), sweep=(), cpu_sweep=(), edge_shapes=(), cpu_edge_shapes=(),
        bench_shapes=(), adversarial=(),
    )


def test_compute_bound_matmul_at_its_floor_is_100_percent() -> None:
    op, shape = _op(True), (8192, 8192, 8192)
    flops = 2 * 8192**3
    floor = flops / 989.4e12 * 1e6
    r = roofline(op, shape, torch.bfloat16, floor, H100, CEILINGS)
    assert r.bound == "compute" and r.throughput_unit == "TFLOP/s"
    assert r.tflops == pytest.approx(989.4) and r.throughput == r.tflops
    assert r.pct_peak_datasheet == pytest.approx(100.0)
    # Against the measured 800 TFLOP/s the same kernel would be 989.4/800 = 124% "of peak".
    assert r.pct_peak_measured == pytest.approx(989.4 / 800 * 100)
    slower = roofline(op, shape, torch.bfloat16, floor * 2, H100, CEILINGS)
    assert slower.pct_peak_datasheet == pytest.approx(50.0)


def test_memory_bound_op_uses_bandwidth() -> None:
    op, shape = _op(False), (4096, 1, 4096)  # a matrix-vector product: ~1 flop per byte
    nbytes = (4096 * 4096 + 4096 + 4096) * 2
    latency = 20.0
    r = roofline(op, shape, torch.float16, latency, H100, CEILINGS)
    assert r.bound == "memory" and r.throughput_unit == "GB/s"
    assert r.gbps == pytest.approx(nbytes / 20e-6 / 1e9) and r.throughput == r.gbps
    assert r.floor_us_datasheet == pytest.approx(nbytes / 3352e9 * 1e6)
    assert r.pct_peak_datasheet == pytest.approx(r.gbps / 3352 * 100)
    assert r.pct_peak_measured == pytest.approx(r.gbps / 3000 * 100)


def test_fp32_is_held_to_the_non_tensor_peak() -> None:
    op, shape = _op(True), (4096, 4096, 4096)
    r = roofline(op, shape, torch.float32, 5000.0, H100, CEILINGS)
    compute_floor = 2 * 4096**3 / 66.9e12 * 1e6
    assert r.floor_us_datasheet == pytest.approx(compute_floor)
    # The measured bf16 ceiling, scaled by the datasheet ratio fp32/bf16.
    assert measured_tflops(CEILINGS, H100, torch.float32) == pytest.approx(800 * 66.9 / 989.4)
    assert r.floor_us_measured == pytest.approx(2 * 4096**3 / (800e12 * 66.9 / 989.4) * 1e6)


def test_without_a_gpu_percentages_are_none() -> None:
    r = roofline(_op(False), (64, 1, 64), torch.float32, 1000.0, None, None)
    assert r.pct_peak_datasheet is None and r.pct_peak_measured is None
    assert r.floor_us_datasheet is None and r.bound is None
    assert r.gbps > 0 and r.tflops > 0


def test_measured_without_a_spec_only_for_bf16() -> None:
    op, shape = _op(True), (1024, 1024, 1024)
    assert roofline(op, shape, torch.bfloat16, 100.0, None, CEILINGS).pct_peak_measured > 0
    assert roofline(op, shape, torch.float16, 100.0, None, CEILINGS).pct_peak_measured is None


def test_no_ceilings_means_no_measured_percentage() -> None:
    r = roofline(_op(True), (1024, 1024, 1024), torch.bfloat16, 100.0, H100, None)
    assert r.pct_peak_datasheet is not None and r.pct_peak_measured is None


@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan")])
def test_latency_must_be_positive(latency: float) -> None:
    with pytest.raises(ValueError):
        roofline(_op(True), (8, 8, 8), torch.float16, latency, H100, CEILINGS)


def test_floor_is_the_slower_of_compute_and_memory() -> None:
    assert floor_us(1e12, 1e9, 1.0, 1000.0) == pytest.approx(1e6)  # 1 s of compute vs 1 ms
    assert floor_us(1e6, 1e12, 1000.0, 1.0) == pytest.approx(1e9)  # 1000 s of traffic
    assert floor_us(1.0, 1.0, None, 1.0) is None


def _registered_types() -> list[str]:
    return [t for t in KERNEL_TYPES
            if importlib.util.find_spec(f"autokernel.ops.{t}") is not None]


@pytest.mark.parametrize("kernel_type", _registered_types())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_registered_ops_reach_100_percent_exactly_at_their_floor(kernel_type: str,
                                                                   dtype: torch.dtype) -> None:
    spec = get_spec(kernel_type)
    shape = spec.bench_shapes[0]
    r = roofline(spec, shape, dtype, 1.0, H100, CEILINGS)
    at_floor = roofline(spec, shape, dtype, r.floor_us_datasheet, H100, CEILINGS)
    assert at_floor.pct_peak_datasheet == pytest.approx(100.0)
    assert at_floor.throughput_unit == ("TFLOP/s" if spec.compute_bound else "GB/s")
    # A memory-bound type at a realistic shape must be bound by memory on an H100, and vice versa.
    assert at_floor.bound == ("compute" if spec.compute_bound else "memory")
