"""The cross-entropy starter against the upcast reference: shapes, dtypes, traps, tunables."""

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
from autokernel.ops.cross_entropy import IGNORE_INDEX
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("cross_entropy")
KERNEL = load_starter("cross_entropy")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# A row shorter than the smallest block, one over several of the smallest blocks, and one over
# two of the largest: every combination runs its loop once, a few times, and past a partial block.
TUNABLE_SHAPES = ((7, 37), (3, 1100), (2, 17000))
TUNABLE_COMBINATIONS = covering_sample(starter_space("cross_entropy"), count=12, seed=0)


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


@pytest.mark.parametrize("shape", [(8, 37), (3, 9001)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 32000), (1023, 50257), (256, 128256)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_output_is_a_float32_scalar_for_every_dtype(device) -> None:
    for dtype in SPEC.dtypes:
        out = KERNEL.kernel_fn(*_inputs((4, 100), dtype, device))
        assert out.shape == torch.Size([]) and out.dtype == torch.float32, dtype


def test_every_target_ignored_gives_nan_like_torch(device) -> None:
    logits, targets = _inputs((6, 50), torch.float32, device)
    targets = torch.full_like(targets, IGNORE_INDEX)
    assert torch.isnan(SPEC.reference(logits, targets))
    assert torch.isnan(KERNEL.kernel_fn(logits, targets))


def test_ignored_rows_do_not_change_the_loss(device) -> None:
    # Appending ignored rows with wild logits must leave the mean exactly where it was.
    logits, targets = _inputs((5, 300), torch.float32, device)
    junk = torch.full((3, 300), 1.0e4, device=device)
    padded_logits = torch.cat([logits, junk])
    padded_targets = torch.cat([targets, torch.full((3,), IGNORE_INDEX, device=device)])
    assert torch.equal(KERNEL.kernel_fn(logits, targets),
                       KERNEL.kernel_fn(padded_logits, padded_targets))


def test_non_contiguous_logits(device) -> None:
    logits, targets = _inputs((6, 80), torch.float16, device)
    column_major = logits.t().contiguous().t()
    assert not column_major.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (column_major, targets), "column-major")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (logits[:, ::2], targets % 40),
                             "every other column")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (logits[::2], targets[::2]),
                             "every other row (row stride 160)")


def test_rejects_mismatched_shapes(device) -> None:
    logits, targets = _inputs((6, 80), torch.float32, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(logits, targets[:5])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(logits.view(2, 3, 80), targets)


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((33, 700), torch.bfloat16, device))
    assert_deterministic(KERNEL.kernel_fn, _inputs((3, 9001), torch.float32, device, "large"))


@pytest.mark.parametrize("shape", [(9, 37), (2, 9001)], ids=str)
def test_writes_every_output_element(shape, device) -> None:
    args = _inputs(shape, torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("cross_entropy", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")
    masked = SPEC.adversarial[[c.name for c in SPEC.adversarial].index("masked_vocab")]
    generator = torch.Generator(device=device).manual_seed(5)
    args = masked.make_inputs((4, 1100), torch.float32, device, generator)
    assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} masked_vocab")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("cross_entropy")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((5, 300), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")
