"""add_layernorm (residual add + LayerNorm, returning (y, h)): the starter against the upcast
reference in both variants, the adversarial cases (a large mean a one-pass variance loses,
cancelling rows whose y is the bias), the harness PASSing the starter, the profiler's pattern
(nn.LayerNorm routed, F.layer_norm outside a module not) and verify's fused tap with gradients.
The harness's per-output checks are type-independent: tests/test_add_rmsnorm.py covers them."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from conftest import DEVICE
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
    dtype_tolerance_params,
    load_kernel_module,
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
)

from autokernel.harness.result import Status
from autokernel.harness.runner import run_bench
from autokernel.kernels import starter_path
from autokernel.ops import get_spec
from autokernel.ops.spec import dtype_name

SPEC = get_spec("add_layernorm")
KERNEL = load_starter("add_layernorm")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
MODELS = Path(__file__).parent / "fixtures" / "models"
# Odd widths (1000, 4099), one row, one column, and a row past the single-pass limit.
SMALL_SHAPES = ((1, 1), (4, 37), (7, 33), (3, 1000), (2, 4099), (33, 1), (2, 20000))

_inputs = functools.partial(seeded_inputs, SPEC)


@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=str)
def test_matches_reference_small(shape, dtype, atol, rtol, device) -> None:
    args = _inputs(shape, dtype, device)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol) -> None:
    args = _inputs(shape, dtype, "cuda")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype}")


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, device) -> None:
    for shape in ((8, 37), (3, 4099)):
        assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype) -> None:
    for shape in ((4096, 4096), (1024, 32000)):
        assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_a_one_pass_variance_fails_the_large_mean_case(device, tmp_path: Path) -> None:
    """The case is not vacuous: the starter with E[h²] - E[h]² in place of its centred variance
    (single_pass) is far off on it in float32, and still right on ordinary rows."""
    source = starter_path("add_layernorm").read_text()
    edits = {  # no shift by the row's first element, and the variance from E[h²] - E[h]²
        "    pivot = _row_pivot(": "    pivot = 0.0 * _row_pivot(",
        "    rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / n_cols + tl.cast(eps, tl.float32))\n":
            "    rstd = tl.rsqrt(tl.sum(h * h, axis=1) / n_cols - mean * mean + tl.cast(eps, tl.float32))\n",
    }
    one_pass = source
    for old, new in edits.items():
        assert old in one_pass, old
        one_pass = one_pass.replace(old, new)
    module = load_kernel_module(one_pass, tmp_path, "one_pass")
    assert_matches_reference(SPEC, module.kernel_fn, _inputs((4, 37), torch.float32, device))
    case = next(c for c in SPEC.adversarial if c.name == "large_mean_rows")
    with pytest.raises(AssertionError, match="elements off"):
        assert_adversarial_case_passes(SPEC, module.kernel_fn, case, (8, 1000), torch.float32,
                                       device)


def test_h_is_the_rounded_sum_and_a_cancelled_row_is_the_bias(device) -> None:
    """h is x + residual rounded once to x's dtype, bit for bit what `x + residual` gives; a row
    whose sum is exactly zero normalizes to the bias, not NaN."""
    x, residual, weight, bias, eps = _inputs((6, 257), torch.float16, device)
    residual[2] = -x[2]
    y, h = KERNEL.kernel_fn(x, residual, weight, bias, eps)
    assert torch.equal(h, x + residual)
    assert torch.equal(y[2], bias)


@pytest.mark.parametrize("variant", ["single_pass", "two_pass"])
def test_both_variants_write_every_element_of_both_outputs(variant, device,
                                                           tmp_path: Path) -> None:
    module = load_starter_with("add_layernorm", {"VARIANT": variant, "BLOCK_N": 512,
                                                 "ROWS_PER_PROGRAM": 2}, tmp_path)
    for shape in ((5, 37), (3, 1100)):
        args = _inputs(shape, torch.float32, device)
        with nan_filled_allocations():
            assert_matches_reference(SPEC, module.kernel_fn, args, f"{variant} {shape}")
    case = next(c for c in SPEC.adversarial if c.name == "large_mean_rows")
    assert_adversarial_case_passes(SPEC, module.kernel_fn, case, (4, 1100), torch.float32, device)
    assert_deterministic(module.kernel_fn, _inputs((3, 1100), torch.bfloat16, device))


def test_strided_and_three_dim_inputs(device) -> None:
    x, residual, weight, bias, eps = _inputs((6, 80), torch.float16, device)
    strided = x.t().contiguous().t()  # same values, column-major
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (strided, residual, weight, bias, eps),
                             "column-major x")
    assert_matches_reference(SPEC, KERNEL.kernel_fn,
                             (x.view(2, 3, 80), residual.view(2, 3, 80), weight, bias, eps),
                             "3-d")


@pytest.mark.slow
def test_the_starter_passes_the_harness(tmp_path: Path) -> None:
    result = run_bench(starter_path("add_layernorm"), device=DEVICE, quick=True, timeout_s=300,
                       cache_dir=tmp_path / "cache")
    assert result.status is Status.PASS, result.reason
    assert all(result.stage_cases[stage] > 0 for stage in ("smoke", "shape_sweep", "stability",
                                                          "determinism", "edge_sizes"))


# ---------------------------------------------------------------------------------------------
# Profiler and verify


def test_the_profiler_claims_the_add_and_the_layernorm_as_one_call() -> None:
    from test_profiler import cpu_plan

    plan = cpu_plan("add_layernorm")
    fused = next(t for t in plan.targets if t.kernel_type == "add_layernorm")
    assert fused.calls == 3
    routes = {s.module: s.route for s in fused.call_sites}
    # BERT's post-norm and GPT-2's pre-norm pair are spliced; F.layer_norm in no module is not.
    assert routes == {"blocks.0": "call chain", "blocks.1": "call chain",
                      "": "no: F.layer_norm outside nn.LayerNorm"}
    assert all(s.aten_op == "aten::add + aten::layer_norm" for s in fused.call_sites)
    assert all(dict(s.params) == {"eps": 1e-5} for s in fused.call_sites)
    plain = next(t for t in plan.targets if t.kernel_type == "layernorm")
    assert [s.module for s in plain.call_sites] == ["blocks.1.ln_1"]  # fed by no add


@pytest.mark.slow
def test_verify_routes_the_pair_as_one_kernel_call_with_gradients(tmp_path: Path) -> None:
    """The patched fixture model equals eager, one kernel call per nn.LayerNorm pair (a bias-free
    one included); under autograd the gradients of its input and parameters match eager's."""
    from fabricated_run import fabricate_run

    import autokernel
    from autokernel.profiling.model_loader import load_model_file, run_forward

    run, _ = fabricate_run(MODELS / "add_layernorm.py", tmp_path / "run")
    kernels = autokernel.load(run, device="cpu")
    loaded = load_model_file(MODELS / "add_layernorm.py", device="cpu")
    expected = run_forward(loaded)
    x = torch.randn(3, 40, 96, generator=torch.Generator().manual_seed(3), requires_grad=True)
    eager_out = loaded.model(x)
    eager_grads = torch.autograd.grad(eager_out.square().sum(), [x, *loaded.model.parameters()])
    patch = kernels.patch(loaded.model)
    try:
        routed = run_forward(loaded)
        fused = next(s for s in patch.report.kernels.values() if s.kernel_type == "add_layernorm")
        assert fused.calls == 2 and not fused.fallbacks
        assert {"blocks.0.norm", "blocks.1.ln_2"} <= set(fused.modules)
        patched_out = loaded.model(x)
        patched_grads = torch.autograd.grad(patched_out.square().sum(),
                                            [x, *loaded.model.parameters()])
        assert fused.calls == 4
    finally:
        patch.unpatch()
    torch.testing.assert_close(routed, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(patched_out, eager_out, atol=1e-4, rtol=1e-4)
    for got, want in zip(patched_grads, eager_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
