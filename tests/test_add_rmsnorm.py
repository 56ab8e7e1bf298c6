"""add_rmsnorm (residual add + RMSNorm, returning (y, h)): the starter against the upcast
reference, the harness's checks of each of two outputs, the profiler's pattern and verify's
route (the add deferred into the norm module it feeds)."""

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

SPEC = get_spec("add_rmsnorm")
KERNEL = load_starter("add_rmsnorm")
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


def test_h_is_the_rounded_sum_and_y_normalizes_it(device) -> None:
    """h is x + residual rounded once to x's dtype, bit for bit what `x + residual` gives; a
    cancelling row's y is exactly 0, not NaN."""
    x, residual, weight, eps = _inputs((6, 257), torch.float16, device)
    residual[2] = -x[2]
    y, h = KERNEL.kernel_fn(x, residual, weight, eps)
    assert torch.equal(h, x + residual)
    assert torch.equal(y[2], torch.zeros_like(y[2]))


@pytest.mark.parametrize("variant", ["single_pass", "two_pass"])
def test_both_variants_write_every_element_of_both_outputs(variant, device,
                                                           tmp_path: Path) -> None:
    module = load_starter_with("add_rmsnorm", {"VARIANT": variant, "BLOCK_N": 512,
                                               "ROWS_PER_PROGRAM": 2}, tmp_path)
    for shape in ((5, 37), (3, 1100)):
        args = _inputs(shape, torch.float32, device)
        with nan_filled_allocations():
            assert_matches_reference(SPEC, module.kernel_fn, args, f"{variant} {shape}")
    assert_deterministic(module.kernel_fn, _inputs((3, 1100), torch.bfloat16, device))


def test_strided_and_three_dim_inputs(device) -> None:
    x, residual, weight, eps = _inputs((6, 80), torch.float16, device)
    strided = x.t().contiguous().t()  # same values, column-major
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (strided, residual, weight, eps),
                             "column-major x")
    assert_matches_reference(SPEC, KERNEL.kernel_fn,
                             (x.view(2, 3, 80), residual.view(2, 3, 80), weight, eps), "3-d")


# ---------------------------------------------------------------------------------------------
# The harness: each of the two outputs gets every check one output gets

# kernel_fn redefined at the end of the starter's source: the starter's answer, then a cheat.
CHEATS = {
    "wrong_h": ("    y, h = _starter(x, residual, weight, eps)\n"
                "    return y, x.clone()\n",
                Status.FAIL, "output 2 of 2"),
    "one_buffer": ("    y, h = _starter(x, residual, weight, eps)\n"
                   "    both = torch.empty((2, *x.shape), dtype=x.dtype, device=x.device)\n"
                   "    both[0].copy_(y)\n"
                   "    both[1].copy_(h)\n"
                   "    return both[0], both[1]\n",
                   Status.FAIL, "shares memory with output 1"),
    "h_in_residual": ("    y, h = _starter(x, residual, weight, eps)\n"
                      "    residual.copy_(h)\n"
                      "    return y, residual\n",
                      Status.REJECTED, "input mutation"),
    "y_only": ("    y, h = _starter(x, residual, weight, eps)\n"
               "    return y\n",
               Status.FAIL, "not a tuple of 2 plain torch.Tensors"),
    "lazy_h": ("    y, h = _starter(x, residual, weight, eps)\n"
               "    return y, h.as_subclass(Lazy)\n",
               Status.REJECTED, "lazy output"),
    "stale_h": ("    y, h = _starter(x, residual, weight, eps)\n"
                "    if _KEPT and _KEPT[0].shape == h.shape:\n"
                "        _KEPT[0].copy_(h)\n"
                "        return y, _KEPT[0]\n"
                "    _KEPT[:] = [h]\n"
                "    return y, h\n",
                None, ""),
}


def _cheat_kernel(name: str, tmp_path: Path) -> Path:
    body = CHEATS[name][0]
    source = starter_path("add_rmsnorm").read_text() + (
        "\n\nclass Lazy(torch.Tensor):\n    pass\n\n\n_KEPT = []\n_starter = kernel_fn\n\n\n"
        "def kernel_fn(x, residual, weight, eps=1e-6):\n" + body)
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


@pytest.mark.slow
def test_the_starter_passes_the_harness(tmp_path: Path) -> None:
    result = run_bench(starter_path("add_rmsnorm"), device=DEVICE, quick=True, timeout_s=300,
                       cache_dir=tmp_path / "cache")
    assert result.status is Status.PASS, result.reason
    assert all(result.stage_cases[stage] > 0 for stage in ("smoke", "shape_sweep", "stability",
                                                          "determinism", "edge_sizes"))


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_correct_y_with_a_wrong_stale_or_aliased_h_does_not_pass(name: str,
                                                                   tmp_path: Path) -> None:
    _, status, words = CHEATS[name]
    result = run_bench(_cheat_kernel(name, tmp_path), device=DEVICE, quick=True, timeout_s=300,
                       cache_dir=tmp_path / "cache", static_scan=False)
    assert result.status is not Status.PASS, name
    if status is not None:
        assert result.status is status and words in result.reason, (result.status,
                                                                    result.reason)


# ---------------------------------------------------------------------------------------------
# Profiler and verify


def test_the_profiler_claims_the_add_and_the_norm_as_one_call() -> None:
    from test_profiler import cpu_plan

    plan = cpu_plan("add_rmsnorm")
    fused = next(t for t in plan.targets if t.kernel_type == "add_rmsnorm")
    assert fused.calls == 2 and fused.route == "call chain"
    assert not any(t.kernel_type == "rmsnorm" for t in plan.targets)  # both norms taken
    assert {s.aten_op.split(" + ")[1].split("(")[0] for s in fused.call_sites} == \
        {"aten::rms_norm", "rmsnorm"}  # nn.RMSNorm and the hand-written module
    assert all(dict(s.params) == {"eps": 1e-6} for s in fused.call_sites)


@pytest.mark.slow
def test_verify_routes_the_pair_as_one_kernel_call_with_gradients(tmp_path: Path) -> None:
    """The patched fixture model equals eager, with one kernel call per pair; under autograd the
    gradients of its input and parameters match eager's (the op's recompute backward)."""
    from fabricated_run import fabricate_run

    import autokernel
    from autokernel.profiling.model_loader import load_model_file, run_forward

    run, _ = fabricate_run(MODELS / "add_rmsnorm.py", tmp_path / "run")
    kernels = autokernel.load(run, device="cpu")
    loaded = load_model_file(MODELS / "add_rmsnorm.py", device="cpu")
    expected = run_forward(loaded)
    x = torch.randn(3, 40, 96, generator=torch.Generator().manual_seed(3), requires_grad=True)
    eager_out = loaded.model(x)
    eager_grads = torch.autograd.grad(eager_out.square().sum(), [x, *loaded.model.parameters()])
    patch = kernels.patch(loaded.model)
    try:
        routed = run_forward(loaded)
        fused = next(s for s in patch.report.kernels.values() if s.kernel_type == "add_rmsnorm")
        assert fused.calls == 2 and not fused.fallbacks
        assert sorted(fused.modules) == ["blocks.0.norm", "blocks.1.norm"]
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


def test_a_pending_sum_used_otherwise_is_the_add_as_written() -> None:
    """Outside a tapped norm, the stand-in is the plain sum: arithmetic, methods, indexing."""
    from autokernel.integrate.residual_norm import PendingSum

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    pending = PendingSum(None, torch.add, a, b)  # type: ignore[arg-type]
    assert pending.shape == (4, 8) and pending.dtype == torch.float32 and pending.pending
    assert torch.equal(pending * 2, (a + b) * 2)
    assert torch.equal(3 + pending, 3 + (a + b))
    assert torch.equal(pending.float()[1], (a + b)[1])
    assert torch.equal(torch.cat([pending, a]), torch.cat([a + b, a]))
    assert not pending.pending
