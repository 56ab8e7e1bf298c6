"""Datasheet peaks of the GPUs we expect to meet, and how the GPU in this process is recognised.

Every figure is DENSE: NVIDIA and AMD print the 2:4-sparse tensor figure first and the dense one
in a footnote (or not at all); we always take the dense one, because no kernel here uses sparsity.
Tensor figures are for fp16/bf16 inputs with fp32 accumulation, the mode our kernels use. On
GeForce cards that mode runs at half the fp16-accumulate rate, and the half rate is what we list.
`fp32_tflops` is the plain (non-tensor) fp32 FMA peak: our fp32 kernels ask `tl.dot` for ieee
precision, which the tensor cores do not provide.

Recognition (`detect_gpu`) goes, in order:

1. Exact product names, as `torch.cuda.get_device_properties(i).name` prints them (compared
   case-insensitively, ignoring a leading "NVIDIA "/"AMD " and repeated spaces). Never by
   substring: "NVIDIA L4" is not "NVIDIA L40", and "NVIDIA A10" is neither "A10G" nor "A100".
   A name match is cross-checked against the compute capability (an "H100" that does not report
   9.0 is not an H100). A MIG slice reports a longer name ("... MIG 1g.10gb") and is deliberately
   not matched: the estimate below sees the slice's own SM count.
2. AMD parts by `gcnArchName`: gfx942 is an MI300X (192 GB) or MI325X (256 GB), told apart by
   memory size; gfx950 is an MI350X or MI355X (same memory), told apart by the name or the clock,
   else assumed to be the faster MI355X (a higher peak can only make "% of peak" look worse).
3. Anything else: an estimate from the device properties, `estimated=True`. Bandwidth is
   2 x memory clock x bus width / 8 (double data rate, HBM included); tensor peak is
   SMs x clock x 2 x the dense per-SM FMA rate of the architecture (the professional rate where
   GeForce parts are slower, again erring high).

User override: the environment variable `AUTOKERNEL_GPU_PEAKS`, comma-separated `key=value`
pairs with keys `fp16_tflops`, `bf16_tflops`, `tf32_tflops`, `fp32_tflops`, `gbps`, `memory_gb`,
e.g. `AUTOKERNEL_GPU_PEAKS="bf16_tflops=900,gbps=4000"`. It replaces those fields of whatever was
detected (or, on a GPU that cannot be estimated, supplies them: then `bf16_tflops` and `gbps` are
required). Set it for a card whose clocks are capped, or one missing from the table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Any

import torch

OVERRIDE_ENV = "AUTOKERNEL_GPU_PEAKS"
OVERRIDE_KEYS: tuple[str, ...] = (
    "fp16_tflops", "bf16_tflops", "tf32_tflops", "fp32_tflops", "gbps", "memory_gb",
)


@dataclass(frozen=True)
class GPUSpec:
    key: str
    """Stable identifier, e.g. "h100-sxm"; "estimated" for an estimate."""
    name: str
    """Product name for people, e.g. "NVIDIA H100 SXM5 80GB"."""
    vendor: str  # "nvidia" or "amd"
    arch: str  # "sm_90", "gfx942"
    compute_capability: tuple[int, int] | None  # NVIDIA only
    sms: int | None
    """SMs (NVIDIA) or CUs (AMD) where the SKU fixes the count."""
    fp16_tflops: float
    bf16_tflops: float
    tf32_tflops: float | None  # None where the part has no TF32 tensor path
    fp32_tflops: float
    gbps: float
    memory_gb: float
    source: str
    torch_names: tuple[str, ...] = ()
    estimated: bool = False
    overridden: bool = False


def _nv(key: str, name: str, cc: tuple[int, int], sms: int | None, bf16: float,
        tf32: float, fp32: float, gbps: float, memory_gb: float, source: str,
        torch_names: tuple[str, ...], fp16: float | None = None) -> GPUSpec:
    return GPUSpec(key, name, "nvidia", f"sm_{cc[0]}{cc[1]}", cc, sms,
                   fp16 if fp16 is not None else bf16, bf16, tf32, fp32, gbps, memory_gb,
                   source, torch_names)


def _amd(key: str, name: str, arch: str, cus: int, bf16: float, tf32: float | None,
         fp32: float, gbps: float, memory_gb: float, source: str,
         torch_names: tuple[str, ...]) -> GPUSpec:
    return GPUSpec(key, name, "amd", arch, None, cus, bf16, bf16, tf32, fp32, gbps, memory_gb,
                   source, torch_names)


_GEFORCE = "GeForce: tensor figures with fp32 accumulate (half the fp16-accumulate rate)"

GPUS: tuple[GPUSpec, ...] = (
    # Hopper
    _nv("h100-sxm", "NVIDIA H100 SXM5 80GB", (9, 0), 132, 989.4, 494.7, 66.9, 3352, 80,
        "H100 datasheet (SXM5): 1979 TF bf16 sparse / 989.4 dense; 3.35 TB/s HBM3",
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB")),
    _nv("h100-pcie", "NVIDIA H100 PCIe 80GB", (9, 0), 114, 756.5, 378.0, 51.2, 2039, 80,
        "H100 datasheet (PCIe): 1513 TF bf16 sparse / 756.5 dense; 2.0 TB/s HBM2e",
        ("NVIDIA H100 PCIe",)),
    _nv("h100-nvl", "NVIDIA H100 NVL 94GB", (9, 0), 132, 835.5, 417.5, 60.0, 3900, 94,
        "H100 NVL datasheet, one GPU: 1671 TF bf16 sparse / 835.5 dense; 3.9 TB/s",
        ("NVIDIA H100 NVL",)),
    _nv("h200-sxm", "NVIDIA H200 SXM 141GB", (9, 0), 132, 989.4, 494.7, 66.9, 4800, 141,
        "H200 datasheet (SXM): compute as H100 SXM; 4.8 TB/s HBM3e",
        ("NVIDIA H200",)),
    _nv("h200-nvl", "NVIDIA H200 NVL 141GB", (9, 0), 132, 835.5, 417.5, 60.0, 4800, 141,
        "H200 datasheet (NVL): 1671 TF bf16 sparse / 835.5 dense; 4.8 TB/s HBM3e",
        ("NVIDIA H200 NVL",)),
    _nv("h20", "NVIDIA H20 96GB", (9, 0), 78, 148.0, 74.0, 44.0, 4000, 96,
        "H20 spec as published: 148 TF fp16/bf16 dense, 74 TF tf32, 44 TF fp32; 4.0 TB/s",
        ("NVIDIA H20",)),
    # Blackwell (datacenter)
    _nv("b200", "NVIDIA B200 (HGX, 1000 W)", (10, 0), 148, 2250.0, 1100.0, 80.0, 8000, 180,
        "Blackwell datasheet, HGX B200: 4.5 PF bf16 sparse / 2.25 dense; 8 TB/s HBM3e",
        ("NVIDIA B200",)),
    _nv("gb200", "NVIDIA GB200 (one GPU)", (10, 0), None, 2500.0, 1250.0, 80.0, 8000, 186,
        "GB200 NVL72 datasheet / 72: 5 PF bf16 sparse / 2.5 dense; 8 TB/s HBM3e",
        ("NVIDIA GB200",)),
    # Ampere (datacenter)
    _nv("a100-sxm-40gb", "NVIDIA A100 SXM4 40GB", (8, 0), 108, 312.0, 156.0, 19.5, 1555, 40,
        "A100 datasheet: 624 TF bf16 sparse / 312 dense; 1555 GB/s HBM2",
        ("NVIDIA A100-SXM4-40GB",)),
    _nv("a100-sxm-80gb", "NVIDIA A100 SXM4 80GB", (8, 0), 108, 312.0, 156.0, 19.5, 2039, 80,
        "A100 80GB datasheet (SXM): 312 TF bf16 dense; 2039 GB/s HBM2e",
        ("NVIDIA A100-SXM4-80GB",)),
    _nv("a100-pcie-40gb", "NVIDIA A100 PCIe 40GB", (8, 0), 108, 312.0, 156.0, 19.5, 1555, 40,
        "A100 datasheet (PCIe 40GB): 312 TF bf16 dense; 1555 GB/s HBM2",
        ("NVIDIA A100-PCIE-40GB",)),
    _nv("a100-pcie-80gb", "NVIDIA A100 PCIe 80GB", (8, 0), 108, 312.0, 156.0, 19.5, 1935, 80,
        "A100 80GB datasheet (PCIe): 312 TF bf16 dense; 1935 GB/s HBM2e",
        ("NVIDIA A100 80GB PCIe",)),
    _nv("a10", "NVIDIA A10", (8, 6), 72, 125.0, 62.5, 31.2, 600, 24,
        "A10 datasheet: 250 TF bf16 sparse / 125 dense; 600 GB/s GDDR6",
        ("NVIDIA A10",)),
    _nv("a10g", "NVIDIA A10G", (8, 6), 80, 70.0, 35.0, 35.0, 600, 24,
        "AWS A10G (no NVIDIA datasheet): 70 TF fp16 tensor, 35 TF fp32; 600 GB/s GDDR6",
        ("NVIDIA A10G",)),
    # Ada
    _nv("l40s", "NVIDIA L40S", (8, 9), 142, 362.05, 183.0, 91.6, 864, 48,
        "L40S datasheet: 733 TF bf16 sparse / 362.05 dense; 864 GB/s GDDR6",
        ("NVIDIA L40S",)),
    _nv("l40", "NVIDIA L40", (8, 9), 142, 181.05, 90.5, 90.5, 864, 48,
        "L40 datasheet: 362.1 TF bf16 sparse / 181.05 dense; 864 GB/s GDDR6",
        ("NVIDIA L40",)),
    _nv("l4", "NVIDIA L4", (8, 9), 58, 121.0, 60.0, 30.3, 300, 24,
        "L4 datasheet: 242 TF bf16 sparse / 121 dense; 300 GB/s GDDR6",
        ("NVIDIA L4",)),
    # GeForce
    _nv("rtx-5090", "NVIDIA GeForce RTX 5090", (12, 0), 170, 209.5, 104.8, 104.8, 1792, 32,
        f"RTX Blackwell whitepaper; {_GEFORCE}; 1792 GB/s GDDR7",
        ("NVIDIA GeForce RTX 5090",)),
    _nv("rtx-4090", "NVIDIA GeForce RTX 4090", (8, 9), 128, 165.2, 82.6, 82.6, 1008, 24,
        f"Ada whitepaper; {_GEFORCE}; 1008 GB/s GDDR6X",
        ("NVIDIA GeForce RTX 4090",)),
    _nv("rtx-4080", "NVIDIA GeForce RTX 4080", (8, 9), 76, 97.5, 48.7, 48.7, 716.8, 16,
        f"Ada whitepaper; {_GEFORCE}; 716.8 GB/s GDDR6X",
        ("NVIDIA GeForce RTX 4080",)),
    _nv("rtx-3090", "NVIDIA GeForce RTX 3090", (8, 6), 82, 71.0, 35.6, 35.6, 936, 24,
        f"Ampere GA102 whitepaper; {_GEFORCE}; 936 GB/s GDDR6X",
        ("NVIDIA GeForce RTX 3090",)),
    _nv("rtx-3080", "NVIDIA GeForce RTX 3080", (8, 6), 68, 59.5, 29.8, 29.8, 760, 10,
        f"Ampere GA102 whitepaper (10 GB card); {_GEFORCE}; 760 GB/s GDDR6X",
        ("NVIDIA GeForce RTX 3080",)),
    # AMD Instinct
    _amd("mi300x", "AMD Instinct MI300X", "gfx942", 304, 1307.4, 653.7, 163.4, 5300, 192,
         "MI300X datasheet: 1307.4 TF bf16 dense (2614.9 sparse); 5.3 TB/s HBM3",
         ("AMD Instinct MI300X",)),
    _amd("mi325x", "AMD Instinct MI325X", "gfx942", 304, 1307.4, 653.7, 163.4, 6000, 256,
         "MI325X datasheet: compute as MI300X; 6 TB/s HBM3E",
         ("AMD Instinct MI325X",)),
    _amd("mi350x", "AMD Instinct MI350X", "gfx950", 256, 2306.9, None, 144.2, 8000, 288,
         "MI350X datasheet: 2.3 PF bf16 dense (2.2 GHz), no TF32 figure listed; 8 TB/s HBM3E",
         ("AMD Instinct MI350X",)),
    _amd("mi355x", "AMD Instinct MI355X", "gfx950", 256, 2516.6, None, 157.3, 8000, 288,
         "MI355X datasheet: 2.5 PF bf16 dense (2.4 GHz), no TF32 figure listed; 8 TB/s HBM3E",
         ("AMD Instinct MI355X",)),
)

GPUS_BY_KEY: dict[str, GPUSpec] = {g.key: g for g in GPUS}

# L2 cache per GPU, in MB, where the product's documentation or the device itself (torch's
# `L2_cache_size` on the machines we ran: 50 MB on an H100 SXM, 60 MB on an H200) states it.
L2_MB: dict[str, float] = {
    "h100-sxm": 50, "h100-pcie": 50, "h100-nvl": 50, "h200-sxm": 60, "h200-nvl": 60,
    "a100-sxm-40gb": 40, "a100-sxm-80gb": 40, "a100-pcie-40gb": 40, "a100-pcie-80gb": 40,
    "a10": 6, "a10g": 6, "l40s": 96, "l40": 96, "l4": 48,
    "rtx-5090": 96, "rtx-4090": 72, "rtx-4080": 64, "rtx-3090": 6, "rtx-3080": 5,
}


def l2_megabytes(spec: GPUSpec) -> float | None:
    """The L2 size of a table entry; None for estimates, overrides without a key, and parts
    whose L2 we have no reliable figure for."""
    return L2_MB.get(spec.key)


def _normalize(name: str) -> str:
    text = re.sub(r"\s+", " ", name).strip().casefold()
    for vendor in ("nvidia ", "amd "):
        text = text.removeprefix(vendor)
    return text


_BY_NAME: dict[str, GPUSpec] = {_normalize(n): g for g in GPUS for n in g.torch_names}


def _arch_base(arch: str | None) -> str | None:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'."""
    if not arch:
        return None
    return arch.split(":", 1)[0].strip().lower() or None


def match_gpu(
    name: str,
    cc: tuple[int, int] | None = None,
    *,
    arch: str | None = None,
    total_memory_bytes: int | None = None,
    clock_khz: int | None = None,
) -> GPUSpec | None:
    """The table entry for a device, or None. See the module docstring for the rules."""
    base = _arch_base(arch)
    spec = _BY_NAME.get(_normalize(name))
    if spec is not None:
        if spec.vendor == "nvidia" and cc is not None and tuple(cc) != spec.compute_capability:
            return None
        if spec.vendor == "nvidia" or base in (None, spec.arch):
            return spec
        # An AMD name that contradicts the architecture: trust the architecture below.
    if base == "gfx942" and total_memory_bytes is not None:
        gib = total_memory_bytes / 2**30
        if gib > 224:
            return GPUS_BY_KEY["mi325x"]
        if gib > 150:
            return GPUS_BY_KEY["mi300x"]
        return None  # MI300A (128 GB, an APU) and cut-down parts: estimate instead
    if base == "gfx950":
        lowered = name.lower()
        if "mi350" in lowered:
            return GPUS_BY_KEY["mi350x"]
        if "mi355" in lowered:
            return GPUS_BY_KEY["mi355x"]
        if clock_khz and clock_khz < 2_300_000:
            return GPUS_BY_KEY["mi350x"]
        return GPUS_BY_KEY["mi355x"]
    return None


@dataclass(frozen=True)
class _ArchRates:
    """Dense FMAs per SM (CU) per clock, and a boost clock for devices that do not report one."""

    tensor_16bit: int
    tf32: int | None
    fp32: int
    boost_mhz: int


# Rates are derived from the datasheet figures above (e.g. H100 SXM: 989.4e12 / (2 * 132 SMs *
# 1.83 GHz) = 2048). Where GeForce and professional parts of one architecture differ, the
# professional (faster) rate is used: an estimate should overstate the peak, never understate it.
_NVIDIA_RATES: dict[tuple[int, int], _ArchRates] = {
    (7, 0): _ArchRates(512, None, 64, 1530),     # V100
    (7, 5): _ArchRates(512, None, 64, 1590),     # T4, Turing
    (8, 0): _ArchRates(1024, 512, 64, 1410),     # A100
    (8, 6): _ArchRates(512, 256, 128, 1740),     # GA10x (A10: 512; GeForce: 256)
    (8, 7): _ArchRates(512, 256, 128, 1300),     # Orin
    (8, 9): _ArchRates(512, 256, 128, 2520),     # Ada
    (9, 0): _ArchRates(2048, 1024, 128, 1980),   # Hopper
    (10, 0): _ArchRates(4096, 2048, 128, 1965),  # Blackwell datacenter
    (12, 0): _ArchRates(512, 256, 128, 2410),    # Blackwell GeForce / RTX Pro
}
_AMD_RATES: dict[str, _ArchRates] = {
    "gfx90a": _ArchRates(512, None, 64, 1700),   # MI200
    "gfx942": _ArchRates(1024, 512, 128, 2100),  # MI300
    "gfx950": _ArchRates(2048, None, 128, 2400),  # MI350
}


def _nvidia_rates(cc: tuple[int, int]) -> _ArchRates | None:
    if cc in _NVIDIA_RATES:
        return _NVIDIA_RATES[cc]
    same_major = [k for k in _NVIDIA_RATES if k[0] == cc[0] and k[1] <= cc[1]]
    return _NVIDIA_RATES[max(same_major)] if same_major else None


def estimate_from_properties(props: Any) -> GPUSpec | None:
    """Peaks from device properties (`torch.cuda.get_device_properties`), or None if unknowable.

    Reads `multi_processor_count`, `major`/`minor`, `gcnArchName`, `total_memory` and, where the
    torch build has them, `clock_rate` and `memory_clock_rate` (kHz) and `memory_bus_width`
    (bits). Without a memory clock and bus width the bandwidth is unknowable: None.
    """
    sms = int(getattr(props, "multi_processor_count", 0) or 0)
    major, minor = int(getattr(props, "major", 0)), int(getattr(props, "minor", 0))
    arch_name = _arch_base(getattr(props, "gcnArchName", None))
    is_amd = bool(arch_name and arch_name.startswith("gfx"))
    rates = _AMD_RATES.get(arch_name or "") if is_amd else _nvidia_rates((major, minor))
    mem_clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if rates is None or sms <= 0 or not mem_clock_khz or not bus_bits:
        return None
    clock_khz = getattr(props, "clock_rate", None) or rates.boost_mhz * 1000
    clock_source = "reported" if getattr(props, "clock_rate", None) else "typical boost"

    def tflops(fma_per_clock: int) -> float:
        return sms * clock_khz * 1e3 * 2 * fma_per_clock / 1e12

    gbps = 2 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9
    tensor = tflops(rates.tensor_16bit)
    arch = arch_name if is_amd else f"sm_{major}{minor}"
    return GPUSpec(
        key="estimated",
        name=str(getattr(props, "name", "unknown GPU")),
        vendor="amd" if is_amd else "nvidia",
        arch=arch or "unknown",
        compute_capability=None if is_amd else (major, minor),
        sms=sms,
        fp16_tflops=tensor,
        bf16_tflops=tensor,
        tf32_tflops=tflops(rates.tf32) if rates.tf32 else None,
        fp32_tflops=tflops(rates.fp32),
        gbps=gbps,
        memory_gb=int(getattr(props, "total_memory", 0)) / 1e9,
        source=(f"estimated from {sms} SMs at {clock_khz / 1e3:.0f} MHz ({clock_source}), "
                f"{bus_bits}-bit memory at {mem_clock_khz / 1e3:.0f} MHz"),
        estimated=True,
    )


class OverrideError(ValueError):
    """AUTOKERNEL_GPU_PEAKS is malformed."""


def parse_overrides(text: str) -> dict[str, float]:
    """'bf16_tflops=900, gbps=4000' -> {'bf16_tflops': 900.0, 'gbps': 4000.0}."""
    values: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in OVERRIDE_KEYS:
            raise OverrideError(
                f"{OVERRIDE_ENV}: bad entry {item!r}; use key=value with keys "
                f"{', '.join(OVERRIDE_KEYS)}"
            )
        try:
            value = float(raw)
        except ValueError as exc:
            raise OverrideError(
                f"{OVERRIDE_ENV}: {key} needs a number, got {raw.strip()!r}") from exc
        if not value > 0:
            raise OverrideError(f"{OVERRIDE_ENV}: {key} must be positive, got {value}")
        values[key] = value
    return values


def apply_overrides(spec: GPUSpec | None, overrides: dict[str, float],
                    device_name: str = "GPU") -> GPUSpec | None:
    """`spec` with the overridden fields replaced (or a spec built from them alone)."""
    if not overrides:
        return spec
    note = f"override {OVERRIDE_ENV}: " + ", ".join(f"{k}={v:g}" for k, v in overrides.items())
    if spec is None:
        missing = [k for k in ("bf16_tflops", "gbps") if k not in overrides]
        if missing:
            raise OverrideError(
                f"{OVERRIDE_ENV}: this GPU is not in the table and cannot be estimated; "
                f"also set {', '.join(missing)}"
            )
        bf16 = overrides["bf16_tflops"]
        return GPUSpec(
            key="override", name=device_name, vendor="unknown", arch="unknown",
            compute_capability=None, sms=None,
            fp16_tflops=overrides.get("fp16_tflops", bf16), bf16_tflops=bf16,
            tf32_tflops=overrides.get("tf32_tflops"),
            fp32_tflops=overrides.get("fp32_tflops", bf16 / 16),
            gbps=overrides["gbps"], memory_gb=overrides.get("memory_gb", 0.0),
            source=note + " (fp32 = bf16/16 unless given)", overridden=True,
        )
    return replace(spec, **overrides, source=f"{spec.source}; {note}", overridden=True)


def detect_gpu(device_index: int = 0) -> GPUSpec | None:
    """The spec of CUDA/ROCm device `device_index` (None without one), overrides applied."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(device_index)
    spec = match_gpu(
        props.name,
        (props.major, props.minor),
        arch=getattr(props, "gcnArchName", None),
        total_memory_bytes=props.total_memory,
        clock_khz=getattr(props, "clock_rate", None),
    ) or estimate_from_properties(props)
    return apply_overrides(spec, parse_overrides(os.environ.get(OVERRIDE_ENV, "")), props.name)


def peak_tflops(spec: GPUSpec, dtype: torch.dtype) -> float:
    """Datasheet compute peak for kernels whose inputs are `dtype`.

    fp32 maps to the non-tensor fp32 peak: our fp32 kernels use ieee precision, not TF32.
    """
    if dtype == torch.float16:
        return spec.fp16_tflops
    if dtype == torch.bfloat16:
        return spec.bf16_tflops
    if dtype == torch.float32:
        return spec.fp32_tflops
    raise ValueError(f"no compute peak for {dtype}; known: float16, bfloat16, float32")
