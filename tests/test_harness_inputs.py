"""The judge's input edits: NaN/inf injection's pattern, drawn in a fixed few calls."""

from __future__ import annotations

import pytest
import torch

from autokernel.harness import inputs as harness_inputs


def test_nonfinite_inputs_have_the_documented_pattern_in_three_draws(
        monkeypatch: pytest.MonkeyPatch) -> None:
    draws = []
    real = torch.randint

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        draws.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(harness_inputs.torch, "randint", counted)
    x = torch.randn(512, 256)
    harness_inputs.inject_nonfinite((x,), torch.Generator().manual_seed(0))
    # One draw per kind, whatever the size: one draw per value took minutes at 4096 rows (GPU).
    assert len(draws) == 3
    assert torch.isposinf(x[0]).sum() == 1 and torch.isnan(x[1]).sum() == 1
    assert torch.isneginf(x[2:-1]).any(dim=1).all()
    assert torch.isfinite(x[2:]).any(dim=1).all()  # a few -inf per row, not a masked-out row
    assert torch.isfinite(x[-1]).all()  # the last row finite (`inject_nonfinite`)


def test_a_one_column_output_is_judged_by_its_elements_alone() -> None:
    """An honest K=64 matmul column that cancels to near zero is within atol per element; the
    row rule's relative bound must not fail it (an N=1 edge shape failed the starter at random),
    while an all-zero output still fails."""
    from autokernel.harness.compare import _check_rows
    from autokernel.ops.spec import Tolerance

    tolerance = Tolerance(atol=1e-4, rtol=1e-4)
    ref = torch.tensor([[1e-6], [0.5], [2.0]])
    out = ref + torch.tensor([[5e-5], [0.0], [0.0]])  # 50x the relative bound, within atol
    assert _check_rows(out, ref, tolerance) is None
    assert _check_rows(torch.zeros_like(ref), ref, tolerance).kind == "degenerate"
