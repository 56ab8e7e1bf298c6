"""The row rule (harness/compare.py) against cancelling ops: an honest matmul whose rows cancel to
near zero passes, while dropped small probabilities and all-zero outputs still fail."""

from __future__ import annotations

import pytest
import torch

from autokernel.harness.compare import check_output
from autokernel.ops import get_spec

CPU = torch.device("cpu")


def _cancelling_operands(m: int, n: int, k: int, dtype: torch.dtype,
                         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A[m, k] @ B[k, n] with every output ~0: the last n columns of each row of A solve for a
    zero row of C (in float64, then rounded to `dtype`), so C is the rounding residue, ~1e-7 in
    fp32, while its terms are O(1)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g, dtype=torch.float64)
    b = torch.randn(k, n, generator=g, dtype=torch.float64) / k ** 0.5
    a[:, -n:] = torch.linalg.solve(b[-n:].T, -(a[:, :-n] @ b[:-n]).T).T
    return a.to(dtype), b.to(dtype)


def _float32_accumulation_reversed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What an honest kernel computes: a float32 accumulation, in another order than the
    oracle's (k from last to first)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in reversed(range(a.shape[1])):
        acc = acc + a[:, k:k + 1].float() * b[k:k + 1].float()
    return acc.to(a.dtype)


def test_only_sums_that_may_cancel_are_cancelling_ops() -> None:
    assert all(get_spec(name).cancelling for name in ("matmul", "fused_mlp", "reduce", "gelu"))
    # Outputs whose honest error scales with themselves keep the row rule; attention's rows are
    # convex combinations of V whose error is relative too (a dropped key still fails there).
    for name in ("softmax", "layernorm", "rmsnorm", "rotary_embedding",
                 "flash_attention", "add_rmsnorm", "add_layernorm"):
        assert not get_spec(name).cancelling, name


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_an_honest_matmul_whose_rows_cancel_passes(dtype: torch.dtype, n: int) -> None:
    spec = get_spec("matmul")
    a, b = _cancelling_operands(64, n, 64, dtype)
    ref = a.double() @ b.double()
    out = _float32_accumulation_reversed(a, b)
    tolerance = spec.tolerance(dtype)
    assert check_output(out, ref, tuple(ref.shape), dtype, CPU, tolerance,
                        cancelling=spec.cancelling) is None
    if dtype == torch.float32:
        # What the rule did before cancelling ops were declared: ~1e5 x the row bound, on rows
        # whose every element is within atol.
        found = check_output(out, ref, tuple(ref.shape), dtype, CPU, tolerance)
        assert found is not None and "row rule" in found.detail, found


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_softmax_with_its_small_probabilities_zeroed_still_fails(dtype: torch.dtype) -> None:
    spec = get_spec("softmax")
    x = torch.randn(4, 700, generator=torch.Generator().manual_seed(7)) * 3
    ref = torch.softmax(x.double(), dim=-1)
    tolerance = spec.tolerance(dtype)
    dropped = torch.where(ref < tolerance.atol * 0.99, 0.0, ref).to(dtype)
    found = check_output(dropped, ref, (4, 700), dtype, CPU, tolerance,
                         cancelling=spec.cancelling)
    assert found is not None and "row rule" in found.detail, found


@pytest.mark.parametrize("name", ["matmul", "softmax"])
def test_all_zero_rows_and_outputs_fail_for_every_op(name: str) -> None:
    spec = get_spec(name)
    dtype = torch.float16
    tolerance = spec.tolerance(dtype)
    # Small values, each within fp16's atol of zero: only the zero checks can see them.
    ref = torch.rand(6, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ref = ref * 1e-3
    zeros = torch.zeros(6, 40, dtype=dtype)
    found = check_output(zeros, ref, (6, 40), dtype, CPU, tolerance,
                         cancelling=spec.cancelling)
    assert found is not None and found.kind == "degenerate", found
    one_zero_row = ref.to(dtype)
    one_zero_row[2] = 0
    found = check_output(one_zero_row, ref, (6, 40), dtype, CPU, tolerance,
                         cancelling=spec.cancelling)
    assert found is not None and found.kind == "degenerate" and "first row 2" in found.detail
    column = ref[:, :1]
    found = check_output(torch.zeros(6, 1, dtype=dtype), column, (6, 1), dtype, CPU, tolerance,
                         cancelling=spec.cancelling)
    assert found is not None and found.kind == "degenerate", found


def test_the_gelu_starter_passes_its_negative_tail() -> None:
    """The gelu starter on the negative_tail case (x in [-12, -3], fp32): 1 + erf cancels, and
    its ~1e-7 absolute error on outputs of ~1e-7 failed the row bound on about half the seeds
    (a starter REJECTED at random). The element rule's atol holds it now; zeros still fail."""
    import importlib.util

    from autokernel.kernels import starter_path

    module_spec = importlib.util.spec_from_file_location("gelu_starter", starter_path("gelu"))
    starter = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(starter)
    spec = get_spec("gelu")
    tolerance = spec.tolerance(torch.float32)
    failed_before = 0
    for seed in range(8):
        x = -3.0 - 9.0 * torch.rand(4, 37, generator=torch.Generator().manual_seed(seed))
        ref = torch.nn.functional.gelu(x.double())
        out = starter.kernel_fn(x, "none")
        assert check_output(out, ref, (4, 37), torch.float32, CPU, tolerance,
                            cancelling=spec.cancelling) is None, seed
        failed_before += check_output(out, ref, (4, 37), torch.float32, CPU, tolerance) is not None
        found = check_output(torch.zeros_like(out), ref, (4, 37), torch.float32, CPU, tolerance,
                             cancelling=spec.cancelling)
        assert found is not None, seed  # the elements near x = -3 are past atol, or all-zero
    assert failed_before  # the case this test is about: the row bound failed an honest kernel
