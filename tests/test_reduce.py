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
    sweep_cases,
)

from autokernel.kernels import starter_path
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


# ---------------------------------------------------------------------------------------------
# params.op: mean and amax, the same kernels with the op as a constexpr

OTHER_OPS = ("mean", "amax")


@pytest.mark.parametrize("op", OTHER_OPS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.cpu_sweep + SPEC.cpu_edge_shapes, ids=str)
def test_mean_and_amax_match_reference_small(shape, dtype, atol, rtol, op, device) -> None:
    # One distribution per shape (rotating), to keep the interpreter's time down.
    distribution = DISTRIBUTIONS[len(str(shape)) % len(DISTRIBUTIONS)]
    args = _inputs(shape, dtype, device, distribution, op=op)
    assert args[-1] == op and args[-2] in (-1, 1)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{op} {shape} {dtype}", {"op": op})


@pytest.mark.parametrize("op", OTHER_OPS)
@pytest.mark.parametrize("shape", [(8, 37), (2, 300, 5)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_mean_and_amax_adversarial(case, dtype, shape, op, device) -> None:
    generator = torch.Generator(device=device).manual_seed(1)
    args = case.make_inputs(shape, dtype, device, generator, op=op)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{case.name} {op} {shape} {dtype}",
                             {"op": op})


@pytest.mark.parametrize("shape, axis", [((5, 3000), -1), ((1, 70000), -1), ((3, 50, 7), 1)],
                         ids=str)
def test_amax_propagates_nan_and_keeps_infinities_and_all_negative_rows(shape, axis,
                                                                        device) -> None:
    x = -1.0 - torch.rand(shape, generator=torch.Generator().manual_seed(4)).to(device)
    rows = x.movedim(axis, -1)  # a view: writes land in x
    rows[0, ..., -1] = float("nan")  # the last element: a masked tail still sees it
    rows[-1, ..., 0] = float("-inf")
    out = KERNEL.kernel_fn(x, axis, "amax")
    expected = x.amax(dim=axis)
    assert torch.equal(out.isnan(), expected.isnan()) and out.isnan().any()
    assert torch.equal(out.nan_to_num(), expected.nan_to_num())  # exact, never seeded with 0


def _amax_dropping_nan() -> str:
    """The reduce starter with NaN dropped from every max, as Triton's `tl.maximum` does on a
    GPU (the interpreter's numpy max keeps it), and without its NaN flag."""
    source = starter_path("reduce").read_text()
    for axis in (1, 0):
        flag = (f'        total = tl.where(tl.max(nan_seen, axis={axis}) > 0, float("nan"), '
                'total)\n')
        assert flag in source
        source = source.replace(flag, "")
    keep = "            acc = tl.maximum(acc, values)\n"
    assert source.count(keep) == 2
    return source.replace(keep, '            acc = tl.maximum(acc, tl.where(values != values, '
                                'float("-inf"), values))\n')


def test_the_harness_fails_an_amax_that_drops_nan(tmp_path: Path) -> None:
    """The harness's nan_rows case catches an amax kernel that does not carry NaN itself, on
    any device."""
    from autokernel.harness.result import Status
    from autokernel.harness.runner import run_bench

    kernel = tmp_path / "kernel.py"
    kernel.write_text(_amax_dropping_nan())
    result = run_bench(kernel, device="cuda" if torch.cuda.is_available() else "cpu",
                       quick=True, params={"op": "amax"}, cache_dir=tmp_path / "cache",
                       timeout_s=300)
    assert result.status is Status.FAIL and "nan_rows" in result.reason, result.reason
    assert "differ where the reference is non-finite" in result.reason


@pytest.mark.parametrize("op", OTHER_OPS)
def test_mean_and_amax_over_any_dim_of_strided_inputs(op, device) -> None:
    x = torch.randn(3, 5, 12, 4, generator=torch.Generator().manual_seed(3)).to(device)
    params = {"op": op}
    for axis in (0, 1, 2, 3, -3):
        assert_matches_reference(SPEC, KERNEL.kernel_fn, (x, axis, op), f"{op} dim {axis}", params)
    transposed = x.transpose(1, 3)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (transposed, 1, op), f"{op} strided", params)
    with pytest.raises(ValueError, match="not one of"):
        KERNEL.kernel_fn(x, 1, "prod")


@pytest.mark.parametrize("op", ("sum", *OTHER_OPS))
def test_split_n_stages_agree_with_row_loop(op, device, tmp_path: Path) -> None:
    # A mean's stage 1 writes sums; only stage 2 divides, by the whole row's length.
    x = _inputs((2, 40000), torch.float32, device, "positive")[0]
    outs = [load_starter_with("reduce", {"VARIANT": variant, "BLOCK_N": 1024}, tmp_path)
            .kernel_fn(x, -1, op) for variant in ("row_loop", "split_n")]
    torch.testing.assert_close(outs[0], outs[1], atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(outs[1], SPEC.reference(x.double(), -1, op).float(),
                               atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("op", OTHER_OPS)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_mean_and_amax_stock_agree_with_reference(op, dtype, device) -> None:
    args = _inputs((5, 300), dtype, device, "uniform", op=op)
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {op} {dtype}", {"op": op})


def test_op_tolerances_amax_exact_mean_default_sum_unchanged() -> None:
    assert SPEC.tolerance(torch.float32) == SPEC.tolerance(torch.float32, {"op": "sum"})
    assert SPEC.tolerance(torch.float16, {"op": "amax"}).atol == 0.0
    assert SPEC.tolerance(torch.float32, {"op": "mean"}).atol < SPEC.tolerance(torch.float32).atol
