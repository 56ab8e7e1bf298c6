"""The row-sum starter against the upcast reference: shapes, dtypes, traps, variants, tunables."""

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
)

from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("reduce")
KERNEL = load_starter("reduce")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# Many short rows (several rows per program), rows over a few blocks, and one row long enough
# that split_n cuts it into many splits at every SPLIT_BLOCKS x BLOCK_N; then a sum over dim 1
# with an inner run wider than the smallest AXIS_BLOCK_K and a reduced dim of several AXIS_BLOCK_R.
TUNABLE_SHAPES = ((9, 37), (5, 1100), (1, 40000), (2, 70, 19))
TUNABLE_COMBINATIONS = covering_sample(starter_space("reduce"), count=12, seed=0)


_inputs = functools.partial(seeded_inputs, SPEC)


def _case(name: str):
    return next(c for c in SPEC.adversarial if c.name == name)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.cpu_sweep + SPEC.cpu_edge_shapes, ids=str)
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


@pytest.mark.parametrize("shape", [(8, 37), (2, 5000), (1, 70000), (2, 300, 5)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8192, 8192), (1023, 4097), (1, 1 << 22)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_cancelling_pairs_is_exact(dtype, device) -> None:
    # Every partial sum is an exactly representable integer, so a float32 accumulator in any
    # order gets the exact answer; only the final rounding to x's dtype may move it.
    generator = torch.Generator(device=device).manual_seed(2)
    (x,) = _case("cancelling_pairs").make_inputs((4, 30000), dtype, device, generator)
    exact = x.double().sum(-1)
    assert x.abs().max() >= 512  # the big terms are there and do cancel
    assert torch.equal(KERNEL.kernel_fn(x), exact.to(dtype))


def test_leading_dims_one_dim_and_non_contiguous_inputs(device) -> None:
    (x,) = _inputs((6, 40), torch.float16, device)
    column_major = x.t().contiguous().t()
    assert not column_major.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (column_major,), "column-major")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x[:, ::2],), "every other column")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x[::2],), "every other row")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x.view(2, 3, 40),), "3-d input")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x[0],), "1-d input -> 0-d sum")


def test_sums_over_any_dim_of_strided_inputs(device) -> None:
    x = torch.randn(3, 7, 40, 5, generator=torch.Generator().manual_seed(3)).to(device)
    for axis in (0, 1, 2, -4, -3):
        assert_matches_reference(SPEC, KERNEL.kernel_fn, (x, axis), f"over dim {axis}")
    transposed = x.transpose(1, 3)  # inner dims no longer contiguous: strides, not a copy
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (transposed, 1), "strided, over dim 1")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x[:, ::2], 2), "every other row")
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, 4)


def test_rejects_empty_and_0d_inputs(device) -> None:
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(torch.ones((), device=device))
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(torch.ones((3, 0), device=device))


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((33, 1025), torch.bfloat16, device))
    assert_deterministic(KERNEL.kernel_fn, _inputs((1, 70000), torch.float32, device, "large"))


@pytest.mark.parametrize("shape", [(9, 37), (1, 70000)], ids=str)
def test_writes_every_output_element(shape, device) -> None:
    args = _inputs(shape, torch.float32, device)
    with nan_filled_allocations():  # also poisons split_n's float32 partials buffer
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("reduce", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")
    generator = torch.Generator(device=device).manual_seed(5)
    args = _case("edge_columns").make_inputs((3, 3001), torch.float32, device, generator)
    assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} edge_columns")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("reduce")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((5, 300), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")
