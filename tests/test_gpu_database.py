"""GPU recognition on the exact strings torch reports, the datasheet table, estimates, overrides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from autokernel.gpu.database import (
    GPUS,
    GPUS_BY_KEY,
    OVERRIDE_ENV,
    OverrideError,
    apply_overrides,
    detect_gpu,
    estimate_from_properties,
    match_gpu,
    parse_overrides,
    peak_tflops,
)

GiB = 2**30


@pytest.mark.parametrize(
    "torch_name, cc, key",
    [
        ("NVIDIA H100 80GB HBM3", (9, 0), "h100-sxm"),
        ("NVIDIA H100 PCIe", (9, 0), "h100-pcie"),
        ("NVIDIA H100 NVL", (9, 0), "h100-nvl"),
        ("NVIDIA H200", (9, 0), "h200-sxm"),
        ("NVIDIA H200 NVL", (9, 0), "h200-nvl"),
        ("NVIDIA H20", (9, 0), "h20"),
        ("NVIDIA B200", (10, 0), "b200"),
        ("NVIDIA GB200", (10, 0), "gb200"),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "a100-sxm-40gb"),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "a100-sxm-80gb"),
        ("NVIDIA A100-PCIE-40GB", (8, 0), "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", (8, 0), "a100-pcie-80gb"),
        ("NVIDIA L40S", (8, 9), "l40s"),
        ("NVIDIA L40", (8, 9), "l40"),
        ("NVIDIA L4", (8, 9), "l4"),
        ("NVIDIA A10", (8, 6), "a10"),
        ("NVIDIA A10G", (8, 6), "a10g"),
        ("NVIDIA GeForce RTX 5090", (12, 0), "rtx-5090"),
        ("NVIDIA GeForce RTX 4090", (8, 9), "rtx-4090"),
        ("NVIDIA GeForce RTX 4080", (8, 9), "rtx-4080"),
        ("NVIDIA GeForce RTX 3090", (8, 6), "rtx-3090"),
        ("NVIDIA GeForce RTX 3080", (8, 6), "rtx-3080"),
        ("AMD Instinct MI300X", None, "mi300x"),
        ("AMD Instinct MI325X", None, "mi325x"),
        ("AMD Instinct MI350X", None, "mi350x"),
        ("AMD Instinct MI355X", None, "mi355x"),
    ],
)
def test_exact_torch_names_match(torch_name: str, cc: tuple[int, int] | None, key: str) -> None:
    spec = match_gpu(torch_name, cc)
    assert spec is not None and spec.key == key
    assert not spec.estimated


def test_name_matching_ignores_case_spacing_and_vendor_prefix() -> None:
    assert match_gpu("  nvidia   h100 80gb hbm3 ", (9, 0)).key == "h100-sxm"
    assert match_gpu("H100 PCIe", (9, 0)).key == "h100-pcie"


@pytest.mark.parametrize(
    "torch_name, cc, key",
    [
        # Short names that are prefixes of longer ones must never swallow them, or vice versa.
        ("NVIDIA L4", (8, 9), "l4"),
        ("NVIDIA L40", (8, 9), "l40"),
        ("NVIDIA L40S", (8, 9), "l40s"),
        ("NVIDIA A10", (8, 6), "a10"),
        ("NVIDIA A10G", (8, 6), "a10g"),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "a100-sxm-80gb"),
        ("NVIDIA H20", (9, 0), "h20"),
        ("NVIDIA H200", (9, 0), "h200-sxm"),
    ],
)
def test_prefix_traps(torch_name: str, cc: tuple[int, int], key: str) -> None:
    assert match_gpu(torch_name, cc).key == key


@pytest.mark.parametrize(
    "torch_name",
    [
        "NVIDIA L4 Extra",              # unknown SKU: not "L4"
        "NVIDIA A100",                  # ambiguous (which memory?): estimate instead
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a MIG slice has its own SM count
        "NVIDIA A1000",
        "NVIDIA GeForce RTX 4090 D",
    ],
)
def test_unknown_names_do_not_match(torch_name: str) -> None:
    assert match_gpu(torch_name, (9, 0)) is None
    assert match_gpu(torch_name, None) is None


def test_compute_capability_cross_check() -> None:
    assert match_gpu("NVIDIA H100 80GB HBM3", (8, 0)) is None
    assert match_gpu("NVIDIA H200", (10, 0)) is None
    assert match_gpu("NVIDIA L4", (8, 6)) is None
    assert match_gpu("NVIDIA H100 80GB HBM3", None).key == "h100-sxm"  # nothing to contradict


def test_amd_by_architecture_and_memory() -> None:
    gfx942 = "gfx942:sramecc+:xnack-"
    assert match_gpu("", None, arch=gfx942, total_memory_bytes=192 * GiB).key == "mi300x"
    assert match_gpu("", None, arch="gfx942", total_memory_bytes=256 * GiB).key == "mi325x"
    assert match_gpu("", None, arch="gfx942", total_memory_bytes=128 * GiB) is None  # MI300A
    assert match_gpu("AMD Instinct MI350X VF", None, arch="gfx950").key == "mi350x"
    generic = "AMD Radeon Graphics"
    assert match_gpu(generic, None, arch="gfx950", clock_khz=2_200_000).key == "mi350x"
    assert match_gpu(generic, None, arch="gfx950", clock_khz=2_400_000).key == "mi355x"
    # Undecidable: the faster part, so that "% of peak" is never overstated.
    assert match_gpu(generic, None, arch="gfx950").key == "mi355x"
    # A name that contradicts the architecture is not trusted.
    assert match_gpu("AMD Instinct MI300X", None, arch="gfx950").key == "mi355x"


def test_datasheet_anchor_figures() -> None:
    h100 = GPUS_BY_KEY["h100-sxm"]
    assert (h100.bf16_tflops, h100.tf32_tflops, h100.fp32_tflops, h100.gbps) == (
        989.4, 494.7, 66.9, 3352)
    h200 = GPUS_BY_KEY["h200-sxm"]
    assert h200.bf16_tflops == h100.bf16_tflops and h200.gbps == 4800 and h200.memory_gb == 141
    pcie = GPUS_BY_KEY["h100-pcie"]
    assert (pcie.bf16_tflops, pcie.tf32_tflops, pcie.fp32_tflops, pcie.gbps) == (
        756.5, 378.0, 51.2, 2039)
    assert [GPUS_BY_KEY[k].gbps for k in ("a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb")] == [
        1555, 2039, 1935]


@pytest.mark.parametrize("spec", GPUS, ids=[g.key for g in GPUS])
def test_every_entry_is_sane(spec) -> None:
    assert spec.vendor in ("nvidia", "amd")
    assert spec.bf16_tflops >= (spec.tf32_tflops or 0) and spec.bf16_tflops >= spec.fp32_tflops
    if spec.tf32_tflops is not None:
        assert spec.tf32_tflops >= spec.fp32_tflops
    assert spec.fp16_tflops == spec.bf16_tflops  # fp32-accumulate tensor rate: the same for both
    assert 10 <= spec.bf16_tflops <= 3000 and 10 <= spec.fp32_tflops <= 200
    assert 250 <= spec.gbps <= 9000 and 8 <= spec.memory_gb <= 300
    assert spec.source and spec.torch_names
    # Every entry must be reachable by its own names, and only by them.
    for name in spec.torch_names:
        assert match_gpu(name, spec.compute_capability).key == spec.key
    if spec.vendor == "nvidia":
        assert spec.arch == "sm_{}{}".format(*spec.compute_capability)


@pytest.mark.parametrize("spec", [g for g in GPUS if g.sms], ids=[g.key for g in GPUS if g.sms])
def test_entries_are_dense_not_sparse(spec) -> None:
    # The entry's own SM count at a 2.6 GHz clock (above any of these parts' boost clocks), at
    # its architecture's dense rate, bounds the dense figure from above; the 2:4-sparse
    # marketing figure (twice the dense one) would exceed it.
    fast = _h100_like_props(
        multi_processor_count=spec.sms, clock_rate=2_600_000,
        major=spec.compute_capability[0] if spec.compute_capability else 9,
        minor=spec.compute_capability[1] if spec.compute_capability else 4,
        gcnArchName=spec.arch if spec.vendor == "amd" else "")
    bound = estimate_from_properties(fast)
    assert spec.bf16_tflops <= bound.bf16_tflops
    assert spec.fp32_tflops <= bound.fp32_tflops


def test_torch_names_are_unique_across_entries() -> None:
    names = [n.casefold() for g in GPUS for n in g.torch_names]
    assert len(names) == len(set(names))


def test_peak_tflops_by_dtype() -> None:
    h100 = GPUS_BY_KEY["h100-sxm"]
    assert peak_tflops(h100, torch.bfloat16) == 989.4
    assert peak_tflops(h100, torch.float16) == 989.4
    assert peak_tflops(h100, torch.float32) == 66.9  # ieee fp32: not the tf32 tensor figure
    with pytest.raises(ValueError):
        peak_tflops(h100, torch.int8)


def _h100_like_props(**changes) -> SimpleNamespace:
    """Device properties as torch reports them for an H100 SXM (clocks in kHz)."""
    props = dict(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                 total_memory=80 * GiB, clock_rate=1_980_000, memory_clock_rate=2_619_000,
                 memory_bus_width=5120, gcnArchName="NVIDIA H100 80GB HBM3")
    props.update(changes)
    return SimpleNamespace(**props)


def test_estimate_reproduces_a_known_card() -> None:
    spec = estimate_from_properties(_h100_like_props(name="Mystery Hopper"))
    assert spec is not None and spec.estimated and spec.key == "estimated"
    assert spec.gbps == pytest.approx(3352, rel=0.01)  # 2 x 2619 MHz x 5120 bit / 8
    # At the reported max clock the estimate sits a little above the datasheet (1.98 vs 1.83 GHz
    # tensor clock): an estimate errs high so "% of peak" is never flattered.
    assert 989.4 <= spec.bf16_tflops <= 1100
    assert spec.fp32_tflops == pytest.approx(132 * 1.98e9 * 2 * 128 / 1e12)
    assert spec.tf32_tflops == pytest.approx(spec.bf16_tflops / 2)
    assert "132 SMs" in spec.source


def test_estimate_without_clock_uses_a_typical_boost_clock() -> None:
    props = _h100_like_props(name="Mystery Hopper")
    del props.clock_rate  # some torch builds lack it
    spec = estimate_from_properties(props)
    assert spec is not None and "typical boost" in spec.source
    assert spec.bf16_tflops == pytest.approx(132 * 1.98e9 * 2 * 2048 / 1e12)


def test_estimate_for_a_newer_minor_falls_back_to_its_major() -> None:
    spec = estimate_from_properties(_h100_like_props(major=10, minor=3, multi_processor_count=160))
    assert spec is not None and spec.arch == "sm_103"
    assert spec.bf16_tflops == pytest.approx(160 * 1.98e9 * 2 * 4096 / 1e12)


def test_estimate_gives_up_without_memory_figures_or_known_architecture() -> None:
    assert estimate_from_properties(_h100_like_props(memory_bus_width=0)) is None
    assert estimate_from_properties(_h100_like_props(major=6, minor=0)) is None  # Pascal


def test_estimate_for_amd() -> None:
    props = _h100_like_props(name="AMD Instinct MI300A", major=9, minor=4,
                             multi_processor_count=228, clock_rate=2_100_000,
                             memory_clock_rate=1_300_000, memory_bus_width=8192,
                             gcnArchName="gfx942:sramecc+:xnack-", total_memory=128 * GiB)
    spec = estimate_from_properties(props)
    assert spec.vendor == "amd" and spec.arch == "gfx942" and spec.compute_capability is None
    assert spec.bf16_tflops == pytest.approx(228 * 2.1e9 * 2 * 1024 / 1e12)


def test_parse_overrides() -> None:
    assert parse_overrides("bf16_tflops=900, gbps=4000") == {"bf16_tflops": 900.0, "gbps": 4000.0}
    assert parse_overrides("") == {}
    for bad in ("bf16=900", "gbps", "gbps=fast", "gbps=-1", "gbps=0"):
        with pytest.raises(OverrideError):
            parse_overrides(bad)


def test_overrides_replace_fields_and_say_so() -> None:
    h100 = GPUS_BY_KEY["h100-sxm"]
    spec = apply_overrides(h100, {"bf16_tflops": 900.0, "gbps": 3000.0})
    assert (spec.bf16_tflops, spec.gbps, spec.fp16_tflops) == (900.0, 3000.0, 989.4)
    assert spec.overridden and OVERRIDE_ENV in spec.source
    assert apply_overrides(h100, {}) is h100


def test_overrides_alone_describe_an_unknown_gpu() -> None:
    spec = apply_overrides(None, {"bf16_tflops": 100.0, "gbps": 500.0}, "Weird GPU")
    assert spec.name == "Weird GPU" and spec.bf16_tflops == 100.0 and spec.gbps == 500.0
    with pytest.raises(OverrideError, match="gbps"):
        apply_overrides(None, {"bf16_tflops": 100.0})


def test_detect_gpu_applies_the_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    props = _h100_like_props()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    assert detect_gpu(0) == GPUS_BY_KEY["h100-sxm"]
    monkeypatch.setenv(OVERRIDE_ENV, "bf16_tflops=800,gbps=3000")
    spec = detect_gpu(0)
    assert spec.key == "h100-sxm" and spec.bf16_tflops == 800 and spec.gbps == 3000
    monkeypatch.setenv(OVERRIDE_ENV, "bogus=1")
    with pytest.raises(OverrideError):
        detect_gpu(0)


def test_detect_gpu_estimates_unknown_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    props = _h100_like_props(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", multi_processor_count=60)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    spec = detect_gpu(0)
    assert spec.estimated and spec.sms == 60


def test_detect_gpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detect_gpu() is None


@pytest.mark.gpu
def test_detect_gpu_on_this_gpu() -> None:
    props = torch.cuda.get_device_properties(0)
    spec = detect_gpu(0)
    assert spec is not None, f"{props.name!r} neither matched nor estimable"
    if spec.compute_capability is not None:
        assert spec.compute_capability == (props.major, props.minor)
