"""Red team 4's case-plan gaps, closed (tests/adversarial/judge/rt4_*.py):

- the autograd context of a call (plain, no_grad, inference_mode on inference tensors, inputs that
  require grad, the same under no_grad as in an autograd.Function's forward, autocast) is drawn
  per case from the judge's secret, every context in every stage: a kernel that tells one apart
  fails;
- the ops whose kernel_fn the integration hands batched views as they are (rotary's and
  attention's q/k/v, gelu's activations) get batch dims that are not packed (a slice of a longer
  buffer along dim -2, dims -3 and -2 stored swapped; a 2-D input of gelu as a 3-D view);
- every op whose reference defines its output on NaN and ±inf gets such inputs.

Each attack runs only the stages up to the one that catches it (`only_stages`), on the
interpreter.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

from autokernel.harness import runner
from autokernel.harness.cases import (
    BATCH_LAYOUT_TYPES, BATCH_LAYOUTS, GRAD_CONTEXTS, NONFINITE, NONFINITE_TYPES, STAGES,
    plan_cases,
)
from autokernel.harness.candidate import _detached
from autokernel.harness.grad_context import in_context, inputs_in_context
from autokernel.harness.inputs import batch_view, inject_nonfinite, relayout, split_rows
from autokernel.harness.outputs import ghost_proves_nothing
from autokernel.harness.result import BenchResult, Status
from autokernel.ops import get_spec

RED_TEAM = Path(__file__).parent / "adversarial" / "judge"
ON_CPU = DEVICE == "cpu"


def bench(name: str, tmp_path: Path, stages: list[str], **options: object) -> BenchResult:
    return runner.run_bench(RED_TEAM / name, device=DEVICE, timeout_s=300.0, quick=True,
                            cache_dir=tmp_path / "cache", only_stages=stages, **options)


# (file, stages run, one of these in the reason: the case that shows it)
SWEEP = ["smoke", "shape_sweep"]
NEEDS_GRAD = ("(requires_grad)", "(autograd_forward)")
CASES = [
    ("rt4_tell_requires_grad.py", SWEEP, NEEDS_GRAD),
    ("rt4_tell_inference_mode.py", SWEEP, ("(no_grad)", "(inference_mode)", "(autograd_forward)")),
    ("rt4_tell_autograd_forward.py", SWEEP, ("(autograd_forward)",)),
    ("rt4_tell_inference_tensor.py", SWEEP, ("(inference_mode)",)),
    ("rt4_tell_autocast.py", SWEEP, ("(autocast)",)),
    ("rt4_rotary_head_stride.py", ["smoke", "edge_sizes"], ("layout:batch_",)),
    ("rt4_gelu_batch_stride.py", ["smoke", "edge_sizes"], ("layout:batch_",)),
    ("rt4_rmsnorm_hides_nan.py", ["smoke", "stability"], ("nan-and-inf",)),
    ("rt4_gelu_hides_nan.py", ["smoke", "stability"], ("nan-and-inf",)),
]
# How the comparison words a wrong output (`compare.check_output`).
WRONG = ("outside atol", "where the reference is", "never written")


@pytest.mark.skipif(not ON_CPU, reason="the stages named are the interpreter's plan")
@pytest.mark.parametrize("name,stages,texts", CASES, ids=[c[0][4:-3] for c in CASES])
def test_red_team_4_case_gaps(name: str, stages: list[str], texts: tuple[str, ...],
                              tmp_path: Path) -> None:
    result = bench(name, tmp_path, stages)
    assert result.status is Status.FAIL and result.rule is None, result.reason
    assert result.stage in stages, result.reason
    assert any(w in result.reason for w in WRONG), result.reason
    assert any(t in result.reason for t in texts), result.reason


@pytest.mark.skipif(not ON_CPU, reason="the stages named are the interpreter's plan")
def test_an_axis_kernel_that_assumes_a_packed_outer_stride_fails(tmp_path: Path) -> None:
    result = bench("rt4_softmax_axis_outer_stride.py", tmp_path, ["smoke", "edge_sizes"],
                   shapes=[(2, 40, 5)], params={"axis": 1})
    assert result.status is Status.FAIL and result.stage == "edge_sizes", result.reason
    assert "layout:batch_" in result.reason and any(w in result.reason for w in WRONG), \
        result.reason


# -- the plan ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel_type", ["softmax", "rotary_embedding", "matmul"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_stage_runs_every_autograd_context(kernel_type: str, seed: int) -> None:
    spec = get_spec(kernel_type)
    cases = plan_cases(spec, "cpu", list(spec.dtypes), [spec.smoke_shape], [], quick=True,
                       rng=random.Random(seed))
    for stage in STAGES:
        drawn = [c.grad for c in cases if c.stage == stage and c.splice_from is None]
        if len(drawn) >= len(GRAD_CONTEXTS):
            assert set(drawn) == set(GRAD_CONTEXTS), (stage, drawn)
            counts = [drawn.count(g) for g in GRAD_CONTEXTS]
            assert max(counts) - min(counts) <= 1, (stage, counts)
    for case in cases:
        if case.splice_from is not None:  # the refill reuses its repeat's tensors
            assert case.grad == cases[case.splice_from].grad
    # Drawn from the judge's secret: another seed, another assignment.
    other = plan_cases(spec, "cpu", list(spec.dtypes), [spec.smoke_shape], [], quick=True,
                       rng=random.Random(seed + 100))
    assert [c.grad for c in other] != [c.grad for c in cases]


def test_which_ops_get_nonfinite_and_batch_layouts() -> None:
    assert {"softmax", "rmsnorm", "layernorm", "add_rmsnorm", "add_layernorm", "gelu",
            "rotary_embedding", "reduce", "cross_entropy"} <= NONFINITE_TYPES
    for kernel_type in ("rmsnorm", "rotary_embedding", "gelu", "softmax"):
        spec = get_spec(kernel_type)
        cases = plan_cases(spec, "cpu", list(spec.dtypes), [spec.smoke_shape], [], quick=True,
                           rng=random.Random(0))
        assert any(c.inject == NONFINITE for c in cases)
        layouts = {c.layout for c in cases if c.layout}
        assert (set(BATCH_LAYOUTS) <= layouts) == (kernel_type in BATCH_LAYOUT_TYPES)


# -- the layouts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", BATCH_LAYOUTS)
def test_batch_layouts_keep_values_and_unpack_the_batch(layout: str) -> None:
    x = torch.randn(2, 3, 5, 8)
    view = batch_view(x, layout)
    assert torch.equal(view, x) and view.stride(-1) == 1
    # The batch dims are no longer packed behind dim -2.
    assert view.stride(-3) != view.shape[-2] * view.stride(-2)
    # rotary: x is 4-D, the tables 2-D stay as they are.
    cos = torch.randn(5, 8)
    moved = relayout((x, cos, cos), layout)
    assert torch.equal(moved[0], x) and moved[1] is cos
    # gelu: a 2-D input alone is rows of a batch, given as a 3-D view of the same values.
    rows = torch.randn(6, 7)
    (three,) = relayout((rows,), layout)
    assert three.shape == (2, 3, 7) and torch.equal(three.reshape(6, 7), rows)
    assert three.stride(0) != 3 * three.stride(1)


def test_split_rows() -> None:
    assert split_rows(6) == (2, 3) and split_rows(7) == (7, 1) and split_rows(1) == (1, 1)


# -- the contexts ---------------------------------------------------------------------------------

def test_inputs_in_each_context_share_the_judges_memory() -> None:
    x = torch.randn(4, 9)[:, :5]
    x[0, :4] = torch.tensor([float("nan"), float("-inf"), -0.0, 1e-40])
    # A signalling NaN and a NaN with a payload: x * 1 gives them back quiet (and on a GPU as
    # its canonical NaN), which the judge's bitwise input check would call a mutation.
    x.view(torch.int32)[1, :2] = torch.tensor([0x7F800001, 0x7FC00123], dtype=torch.int32)
    bits = x.clone().view(torch.int32)
    targets = torch.arange(4)
    for context in GRAD_CONTEXTS:
        got, t, eps = inputs_in_context((x, targets, 1e-5), context)
        assert got.data_ptr() == x.data_ptr() and got.stride() == x.stride()
        assert torch.equal(got.detach().view(torch.int32), bits)
        assert t.data_ptr() == targets.data_ptr()
        assert got.is_inference() == (context == "inference_mode")
        needs = context in ("requires_grad", "autograd_forward")
        assert got.requires_grad == needs and (got.grad_fn is not None) == needs
        assert not needs or got._base is None  # an activation, not a view of a leaf
        assert not t.requires_grad and eps == 1e-5
        assert torch.equal(x.view(torch.int32), bits)  # every value's bits as they were
        with in_context(context):
            assert torch.is_inference_mode_enabled() == (context == "inference_mode")
            assert torch.is_grad_enabled() == (context in ("plain", "requires_grad", "autocast"))
            assert torch.is_autocast_enabled("cpu") == (context == "autocast")
    with pytest.raises(ValueError):
        inputs_in_context((x,), "sometimes")


def test_outputs_are_compared_detached() -> None:
    leaf = torch.randn(3, requires_grad=True)
    out = _detached(leaf * 2)
    assert not out.requires_grad and out.grad_fn is None
    pair = _detached((leaf * 2, leaf + 1))
    assert all(not t.requires_grad for t in pair)
    assert _detached([1]) == [1]


# -- non-finite inputs -----------------------------------------------------------------------------

def test_nonfinite_inputs_keep_a_finite_last_row() -> None:
    gen = torch.Generator().manual_seed(0)
    (x,) = inject_nonfinite((torch.randn(5, 16),), gen)
    assert torch.isposinf(x[0]).any() and torch.isnan(x[1]).any()
    assert all(torch.isneginf(x[i]).any() for i in (2, 3))
    assert torch.isfinite(x[4]).all()
    (small,) = inject_nonfinite((torch.randn(3, 16),), gen)
    assert torch.isneginf(small[2]).any()


def test_a_ghost_replay_against_an_all_nan_reference_proves_nothing() -> None:
    nan = torch.full((2, 3), float("nan"))
    assert ghost_proves_nothing(torch.ones(2, 3), nan)
    assert ghost_proves_nothing((torch.zeros(2), torch.zeros(2)), (torch.ones(2), torch.ones(2)))
    assert not ghost_proves_nothing(torch.ones(2, 3), torch.tensor([[float("nan"), 1.0, 2.0]]))


def test_axis_targets_and_matmul_get_the_batch_layouts_at_a_batched_shape() -> None:
    reduce = get_spec("reduce")
    cases = plan_cases(reduce, "cpu", [torch.float32], [(2, 300, 33)], [], quick=True,
                       rng=random.Random(0))
    # kernel_fn over dim 1 gets x.reshape(outer, N, inner): a channel slice's view is unpacked.
    assert {(c.shape, c.layout) for c in cases if c.layout in BATCH_LAYOUTS} == {
        ((2, 300, 33), layout) for layout in BATCH_LAYOUTS}
    matmul = get_spec("matmul")
    cases = plan_cases(matmul, "cpu", [torch.float32], [(1, 96, 1, 64)], [], quick=True,
                       rng=random.Random(0))
    shapes = {c.shape for c in cases if c.layout in BATCH_LAYOUTS}
    assert shapes == {(2, 96, 1, 64)}
    a, b = matmul.make_inputs((2, 96, 1, 64), torch.float32, "cpu",
                              torch.Generator().manual_seed(0), "normal")
    for layout in BATCH_LAYOUTS:
        moved = relayout((a, b), layout)
        assert torch.equal(moved[0], a) and torch.equal(moved[1], b)
        assert not moved[0].is_contiguous() and not moved[1].is_contiguous()
