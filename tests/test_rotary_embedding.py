"""The rotary-embedding starter against the upcast reference: shapes, dtypes, traps, tunables."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
    covering_sample,
    dtype_tolerance_params,
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
    starter_space,
    sweep_cases,
)

from autokernel.ops import get_spec
from autokernel.ops.rotary_embedding import rope_cos_sin
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("rotary_embedding")
KERNEL = load_starter("rotary_embedding")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# One position and one head (every block clamps), an odd head count and odd S with a padded head
# dim (72 -> 64 pairs of 36), and S over several of the largest position blocks.
TUNABLE_SHAPES = ((1, 1, 1, 8), (2, 5, 13, 72), (1, 3, 70, 64))
TUNABLE_COMBINATIONS = covering_sample(starter_space("rotary_embedding"), count=12, seed=0)


_inputs = functools.partial(seeded_inputs, SPEC)


@pytest.mark.parametrize("shape, dtype, atol, rtol, distribution", sweep_cases(SPEC))
def test_matches_reference_small(shape, dtype, atol, rtol, distribution, device) -> None:
    args = _inputs(shape, dtype, device, distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.mark.gpu
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol, distribution) -> None:
    args = _inputs(shape, dtype, "cuda", distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.mark.parametrize("shape", [(1, 3, 17, 64), (2, 2, 40, 72)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 32, 4096, 128), (2, 8, 1023, 80), (1, 40, 8192, 72)],
                         ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_cancelling_rotation_really_cancels(device) -> None:
    # The trap only bites if the first half of the exact output is small next to its products.
    case = next(c for c in SPEC.adversarial if c.name == "cancelling_rotation")
    generator = torch.Generator(device=device).manual_seed(2)
    x, cos, sin = case.make_inputs((1, 2, 64, 64), torch.float32, device, generator)
    out_lo = SPEC.reference(x.double(), cos.double(), sin.double())[..., :32]
    products = (x[..., :32] * cos[:, :32]).abs()
    assert products.max() > 20
    assert (out_lo.abs() < 1e-3).float().mean() > 0.5


def test_strided_x_and_cos_sin_views(device) -> None:
    # A [B, S, H, D] projection seen as [B, H, S, D], and cos/sin cut from a wider cache.
    b, h, s, d = 2, 3, 11, 80
    generator = torch.Generator(device=device).manual_seed(3)
    projection = torch.randn((b, s, h, d), generator=generator, device=device).half()
    x = projection.transpose(1, 2)
    assert not x.is_contiguous()
    cos, sin = rope_cos_sin(torch.arange(100, 100 + s, device=device), d, torch.float16)
    wide = torch.zeros((s, 2 * d), dtype=torch.float16, device=device)
    wide[:, :d] = cos
    cos_view = wide[:, :d]
    assert cos_view.stride(0) == 2 * d
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x, cos_view, sin), "strided views")


def test_rejects_odd_head_dim_and_mismatched_tables(device) -> None:
    x, cos, sin = _inputs((1, 2, 5, 8), torch.float32, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x[..., :7], cos[:, :7], sin[:, :7])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, cos[:4], sin[:4])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x[0], cos, sin)


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((2, 3, 33, 80), torch.bfloat16, device))


@pytest.mark.parametrize("shape", [(2, 3, 9, 72), (1, 5, 33, 2)], ids=str)
def test_writes_every_output_element(shape, device) -> None:
    args = _inputs(shape, torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("rotary_embedding", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("rotary_embedding")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((2, 3, 17, 64), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")
