"""The hardware facts of an agent's briefing: a compact, bounded text block.

What it says, in order:
1. The GPU: datasheet specs (SMs, memory bandwidth, dense peaks per dtype, L2) and the per-SM
   limits of its architecture (registers, shared memory, threads, warps, blocks), then the
   MEASURED ceilings where the calibration cache has them, each labelled "datasheet" or
   "measured". On the CPU interpreter it says timings are not meaningful and describes the GPU
   the plan was profiled on, or an H100 SXM as the assumed target, saying which.
2. Per-launch resources of the current best kernel and of the latest candidate when there is
   one: registers, spills, shared memory, warps, grid, theoretical occupancy and waves, compiled
   ahead of time (`autokernel.gpu.resources`: cached by source hash, bounded in time).
3. The best's roofline position at each timed shape: bytes, FLOPs, memory- or compute-bound,
   floor time and % of the measured and datasheet ceilings (`autokernel.gpu.roofline`).
4. Nsight Compute metrics where `ncu` may run, else one line saying why not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autokernel.gpu.calibrate import Ceilings, cached_ceilings_for
from autokernel.gpu.database import (
    GPUS_BY_KEY, OVERRIDE_ENV, GPUSpec, OverrideError, apply_overrides, l2_megabytes, match_gpu,
    parse_overrides,
)
from autokernel.gpu.ncu import collect, describe_metrics, ncu_status
from autokernel.gpu.occupancy import SMLimits, occupancy, sm_limits, waves
from autokernel.gpu.resources import LaunchResources, ResourceProbe, ResourceReport
from autokernel.harness.result import BenchResult

ASSUMED_TARGET = "h100-sxm"  # what a CPU run's kernels are written for when no GPU is known
MAX_SHAPES = 4
MAX_LAUNCHES = 4


@dataclass(frozen=True)
class GpuFacts:
    spec: GPUSpec | None
    name: str | None  # the device name as torch printed it, when known
    basis: str  # how we know: "this run's GPU", "profiled on", "assumed target"
    ceilings: Ceilings | None
    on_cpu: bool


def gpu_facts(device: str, gpu_name: str | None,
              ceilings: Ceilings | None = None) -> GpuFacts:
    """The GPU a run's kernels are for, from a device name (never initialising CUDA here)."""
    on_cpu = device == "cpu"
    spec = match_gpu(gpu_name) if gpu_name else None
    if spec is not None:
        try:
            spec = apply_overrides(spec, parse_overrides(os.environ.get(OVERRIDE_ENV, "")))
        except OverrideError:
            pass  # the harness reports a malformed override; the prompt keeps the datasheet
    if on_cpu:
        if spec is not None:
            return GpuFacts(spec, gpu_name, "the GPU the plan was profiled on", None, True)
        return GpuFacts(GPUS_BY_KEY[ASSUMED_TARGET], None,
                        "the assumed target (the plan names no GPU)", None, True)
    if ceilings is None and gpu_name:
        ceilings = cached_ceilings_for(gpu_name)
    return GpuFacts(spec, gpu_name, "this run's GPU", ceilings, False)


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB"


def describe_gpu(facts: GpuFacts) -> list[str]:
    lines = []
    if facts.on_cpu:
        lines.append("Device: CPU (Triton interpreter): timings are NOT meaningful for GPU "
                     "speed. The GPU facts below are of " + facts.basis + ".")
    spec = facts.spec
    if spec is None:
        lines.append(f"GPU: {facts.name or 'unknown'} is not in autokernel's table: no datasheet "
                     f"specs (set {OVERRIDE_ENV} to give peaks).")
        return lines
    where = "" if facts.on_cpu else f", {facts.basis}"
    peaks = [f"bf16 {spec.bf16_tflops:g}", f"fp16 {spec.fp16_tflops:g}"]
    if spec.tf32_tflops:
        peaks.append(f"tf32 {spec.tf32_tflops:g}")
    peaks.append(f"fp32 (non-tensor) {spec.fp32_tflops:g}")
    l2 = l2_megabytes(spec)
    kind = "estimated" if spec.estimated else "datasheet"
    kind += ", overridden" if spec.overridden else ""
    lines.append(
        f"GPU: {spec.name} ({spec.arch}{where}). {kind.capitalize()}: "
        f"{spec.sms if spec.sms else '?'} SMs; memory bandwidth {spec.gbps:g} GB/s; dense peak "
        f"TFLOP/s {', '.join(peaks)}; L2 {f'{l2:g} MB' if l2 else 'unknown'}; "
        f"{spec.memory_gb:g} GB memory.")
    limits = sm_limits(spec.compute_capability)
    if limits is not None:
        lines.append(
            f"Per SM ({spec.arch}): {limits.registers} registers (at most "
            f"{limits.max_registers_per_thread} per thread), {_kib(limits.shared_bytes)} shared "
            f"memory (at most {_kib(limits.max_shared_per_block)} per block), "
            f"{limits.max_threads} threads = {limits.max_warps} warps, {limits.max_blocks} "
            f"blocks.")
    if facts.on_cpu:
        return lines
    ceilings = facts.ceilings
    if ceilings is None:
        lines.append("Measured ceilings: none cached for this GPU (`autokernel doctor "
                     "--calibrate` measures them); % of peak is against the datasheet only.")
        return lines
    copy = f"copy {ceilings.gbps:.0f} GB/s ({ceilings.gbps / spec.gbps:.0%} of datasheet)"
    gemm = (f"bf16 matmul {ceilings.bf16_tflops:.0f} TFLOP/s "
            f"({ceilings.bf16_tflops / spec.bf16_tflops:.0%} of datasheet)")
    lines.append(f"Measured ceilings (calibrated {ceilings.measured_at[:10]}): {copy}; {gemm}. "
                 "Other dtypes' compute ceilings scale by the datasheet ratio.")
    return lines


def describe_launch(launch: LaunchResources, spec: GPUSpec | None,
                    limits: SMLimits | None) -> str:
    if launch.registers is None and launch.shared_bytes is None:
        return f"{launch.kernel}: did not compile: {launch.error or 'no resource usage'}"
    spills = launch.spill_bytes or 0
    text = (f"{launch.kernel}: {launch.registers if launch.registers is not None else '?'} "
            f"registers/thread, {spills} B spilled/thread"
            f"{' (SPILLS: slow local memory)' if spills else ''}, "
            f"{launch.shared_bytes if launch.shared_bytes is not None else '?'} B shared/block, "
            f"{launch.num_warps} warps, {launch.num_stages} stages, grid {launch.grid_blocks} "
            f"blocks")
    if limits is not None and launch.num_warps:
        occ = occupancy(limits, launch.num_warps, launch.registers, launch.shared_bytes)
        if occ.blocks_per_sm == 0:
            text += f"; does NOT fit on an SM ({occ.limiter})"
        else:
            text += (f"; theoretical occupancy {occ.blocks_per_sm} blocks/SM = "
                     f"{occ.warps_per_sm}/{limits.max_warps} warps ({occ.percent:.0f}%, limited "
                     f"by {occ.limiter})")
            w = waves(launch.grid_blocks, spec.sms or 0, occ.blocks_per_sm) if spec else None
            if w is not None:
                text += f"; {w:.2f} waves on {spec.sms} SMs"  # type: ignore[union-attr]
    if launch.error:
        text += f"; LIMIT: {launch.error}"
    return text


def describe_resources(label: str, report: ResourceReport, spec: GPUSpec | None) -> list[str]:
    if not report.launches:
        return [f"- {label}: not compiled: {report.error or 'no launches recorded'}"]
    limits = sm_limits(spec.compute_capability if spec else None)
    launches = report.launches[:MAX_LAUNCHES]
    lines = [f"- {label}: " + describe_launch(launches[0], spec, limits)]
    lines += ["  " + describe_launch(launch, spec, limits) for launch in launches[1:]]
    if len(report.launches) > MAX_LAUNCHES:
        lines.append(f"  ... {len(report.launches) - MAX_LAUNCHES} more launches")
    return lines


def describe_roofline(best: BenchResult | None, kernel_type: str,
                      facts: GpuFacts) -> list[str]:
    """The best's roofline position at each timed shape (at most MAX_SHAPES)."""
    if best is None or not best.passed or not best.timings:
        return []
    from autokernel.gpu.roofline import roofline
    from autokernel.ops import get_spec
    from autokernel.ops.spec import parse_dtype

    try:
        op = get_spec(kernel_type)
    except Exception:  # a registry entry that fails to import must not stop the prompt
        return []
    gpu = facts.spec
    head = ("Roofline of the best per timed shape (floor = max(FLOPs / peak, bytes / "
            "bandwidth), minimum traffic")
    lines = [head + ("; floors on " + gpu.name + ", the interpreter's times are not GPU times):"
                     if facts.on_cpu and gpu else "):")]
    for timing in best.timings[:MAX_SHAPES]:
        shape, dtype = tuple(timing.shape), parse_dtype(timing.dtype)
        try:
            roof = roofline(op, shape, dtype, timing.latency_us, gpu, facts.ceilings)
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            lines.append(f"- {op.format_shape(shape)}: no roofline ({exc})")
            continue
        size = (f"{roof.bytes / 1e6:.1f} MB, {roof.flops / 1e9:.3g} GFLOP"
                f"{f', {roof.bound}-bound' if roof.bound else ''}")
        line = f"- {op.format_shape(shape)} {timing.dtype}: "
        if facts.on_cpu:
            line += size + (f"; floor {roof.floor_us_datasheet:.2f} us (datasheet)"
                            if roof.floor_us_datasheet else "")
            lines.append(line)
            continue
        line += f"{timing.latency_us:.2f} us; {size}"
        if roof.floor_us_measured is not None and roof.pct_peak_measured is not None:
            line += (f"; floor {roof.floor_us_measured:.2f} us (measured) = "
                     f"{roof.pct_peak_measured:.0f}% of the measured ceiling")
        if roof.floor_us_datasheet is not None and roof.pct_peak_datasheet is not None:
            line += (f"; {roof.floor_us_datasheet:.2f} us (datasheet) = "
                     f"{roof.pct_peak_datasheet:.0f}% of the datasheet roofline")
        lines.append(line)
    if len(best.timings) > MAX_SHAPES:
        lines.append(f"- ... {len(best.timings) - MAX_SHAPES} more shapes")
    return lines


class HardwareBrief:
    """Renders the block; holds the caches (resource compiles, ncu profiles) for a whole run."""

    def __init__(self, probe: ResourceProbe | None = None, compile_resources: bool = True,
                 cache_dir: str | Path | None = None) -> None:
        self.probe = probe or ResourceProbe(cache_dir=cache_dir)
        self.compile_resources = compile_resources
        self._ncu: dict[str, list[str]] = {}

    def resources(self, facts: GpuFacts, shape: Sequence[int], dtype: str,
                  kernels: Sequence[tuple[str, str]]) -> list[str]:
        """Resource lines of each (label, source) at the benchmarked shape."""
        spec = facts.spec
        if spec is None or spec.vendor != "nvidia" or spec.compute_capability is None:
            return ["Kernel resources: not computed (autokernel compiles ahead of time for "
                    "NVIDIA architectures only)."]
        arch = spec.compute_capability[0] * 10 + spec.compute_capability[1]
        where = f"{'x'.join(map(str, shape))} {dtype}"
        lines = [f"Kernel resources per launch at {where} (compiled ahead of time for "
                 f"{spec.arch}; occupancy is theoretical):"]
        for label, source in kernels:
            report = self.probe.report(source, shape, dtype, arch)
            lines += describe_resources(label, report, spec)
        return lines

    def ncu_lines(self, device: str, source: str, shape: Sequence[int], dtype: str) -> list[str]:
        enabled, note = ncu_status(device)
        if not enabled:
            return [note]
        key = ResourceProbe.key(source, shape, dtype, 0)
        if key not in self._ncu:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="autokernel-ncu-") as tmp:
                path = Path(tmp) / "kernel.py"
                path.write_text(source)
                metrics, error = collect(path, shape, dtype)
            self._ncu[key] = (["Nsight Compute, best kernel (one call at the benchmarked shape):"]
                              + describe_metrics(metrics) if metrics
                              else [f"Nsight Compute: no metrics ({error})."])
        return self._ncu[key]

    def render(self, *, device: str, facts: GpuFacts, kernel_type: str,
               shape: Sequence[int], dtype: str, best: BenchResult | None,
               best_source: str | None, candidate: tuple[str, str] | None = None) -> str:
        """The whole block; `candidate` is (label, source) of the latest unkept attempt."""
        lines = describe_gpu(facts)
        kernels = [("best", best_source)] if best_source else []
        if candidate is not None:
            kernels.append(candidate)
        if self.compile_resources and kernels:
            lines += self.resources(facts, shape, dtype, kernels)
        elif kernels:
            lines.append("Kernel resources: not computed for this agent.")
        lines += describe_roofline(best, kernel_type, facts)
        if best_source:
            lines += self.ncu_lines(device, best_source, shape, dtype)
        return "\n".join(lines)
