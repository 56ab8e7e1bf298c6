"""The layernorm starter against the upcast reference: shapes, dtypes, distributions, traps,
tunables."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
    corner_combinations,
    covering_sample,
    dtype_tolerance_params,
    hopper_compile_problems,
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
    starter_space,
    sweep_cases,
)

from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("layernorm")
KERNEL = load_starter("layernorm")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# Short rows with several rows per program, a row over one Welford chunk, a row over the largest
# single-pass limit: every tunable combination meets all three code paths.
TUNABLE_SHAPES = ((7, 37), (3, 1100), (2, 40000))
TUNABLE_COMBINATIONS = corner_combinations(starter_space("layernorm")) + covering_sample(
    starter_space("layernorm"), count=12, seed=0)
TUNABLE_IDS = ["-".join(map(str, t.values())) for t in TUNABLE_COMBINATIONS]
# Each distinct row length of the GPU sweep and edge shapes, with a few rows (compiling depends on
# N; 1-row inputs stay 1-row because Triton specializes an argument equal to 1).
GPU_ROW_SHAPES = sorted({(min(m, 16), n) for m, n in SPEC.sweep + SPEC.edge_shapes})
# On a GPU machine the GPU tests compile for real; these checks record launches interpreted.
NEEDS_INTERPRETER = pytest.mark.skipif(torch.cuda.is_available(), reason="checked by GPU tests")


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


@pytest.mark.parametrize("shape", [(8, 37), (3, 20000)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (1024, 32000), (64, 128256)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_extra_leading_dims_and_non_contiguous_input(device) -> None:
    x, weight, bias, eps = _inputs((6, 80), torch.float16, device)
    strided = x.t().contiguous().t()  # same values, column-major
    assert not strided.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (strided, weight, bias, eps), "column-major")
    assert_matches_reference(
        SPEC, KERNEL.kernel_fn, (x[:, ::2], weight[::2], bias[::2], eps), "strided x and params"
    )
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x.view(2, 3, 80), weight, bias, eps), "3-d")


def test_eps_is_honoured(device) -> None:
    generator = torch.Generator(device=device).manual_seed(0)
    args = SPEC.make_inputs((4, 50), torch.float32, device, generator, "normal", eps=0.5)
    assert args[-1] == 0.5
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, "eps=0.5")


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((5, 700), torch.bfloat16, device))
    assert_deterministic(KERNEL.kernel_fn, _inputs((2, 20000), torch.float32, device))


@pytest.mark.parametrize("shape", [(9, 37), (2, 20000)], ids=str)
def test_writes_every_output_element(shape, device) -> None:
    args = _inputs(shape, torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS, ids=TUNABLE_IDS)
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("layernorm", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("layernorm")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@NEEDS_INTERPRETER
def test_default_launches_compile_for_hopper_without_spills(tmp_path: Path) -> None:
    """What the starter launches at every GPU sweep row length, in every dtype, builds for sm_90
    (H100/H200) with no register spills (checked without a GPU, through Triton's compiler)."""
    calls = [(shape, dtype) for shape in GPU_ROW_SHAPES for dtype in SPEC.dtypes]
    problems = hopper_compile_problems("layernorm", [{}], calls, tmp_path, forbid_spills=True)
    assert not problems, "\n".join(problems)


@NEEDS_INTERPRETER
def test_tunable_combinations_compile_for_hopper(tmp_path: Path) -> None:
    calls = [(shape, torch.float16) for shape in TUNABLE_SHAPES]
    problems = hopper_compile_problems("layernorm", TUNABLE_COMBINATIONS, calls, tmp_path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((5, 300), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")
