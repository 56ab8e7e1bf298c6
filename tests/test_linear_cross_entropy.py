"""linear_cross_entropy: the starter against the upcast oracle (shapes, dtypes, traps, tunables),
the profiler's LM head + loss pattern, the deferred-logits route, and the memory it saves.

CPU runs go through the Triton interpreter (about 2 ms per loop iteration per program), so the
shapes here keep N·V and the block counts tiny; the starter upcasts tiles there, so fp16/bf16 run
too. Full-size shapes are the GPU tests'.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
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
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel.integrate.patch import RoutedKernel, build_kernels, patch_model
from autokernel.kernels import starter_path
from autokernel.ops import get_integration, get_spec
from autokernel.ops.linear_cross_entropy import IGNORE_INDEX
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.profiler import profile_model
from autokernel.profiling.ranking import build_plan
from conftest import DEVICE

SPEC = get_spec("linear_cross_entropy")
KERNEL = load_starter("linear_cross_entropy")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
MODELS = Path(__file__).parent / "fixtures" / "models"
# One V block, several blocks across several slices, and a ragged K loop.
TUNABLE_SHAPES = ((7, 16, 37), (3, 40, 300), (18, 70, 90))
TUNABLE_COMBINATIONS = covering_sample(starter_space("linear_cross_entropy"), count=7, seed=0)

_inputs = functools.partial(seeded_inputs, SPEC)


# ---------------------------------------------------------------------------------------------
# The starter


@pytest.mark.parametrize("shape, dtype, atol, rtol, distribution", sweep_cases(SPEC))
def test_matches_reference_small(shape, dtype, atol, rtol, distribution, device) -> None:
    args = _inputs(shape, dtype, device, distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol) -> None:
    args = _inputs(shape, dtype, "cuda", "normal")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype}")


@pytest.mark.parametrize("shape", [(8, 32, 100), (5, 24, 300)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 2048, 32000), (1023, 4096, 50257)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_output_is_a_float32_scalar_for_every_dtype(device) -> None:
    for dtype in SPEC.dtypes:
        out = KERNEL.kernel_fn(*_inputs((4, 16, 50), dtype, device))
        assert out.shape == torch.Size([]) and out.dtype == torch.float32, dtype


def test_every_target_ignored_gives_nan_like_torch(device) -> None:
    hidden, weight, targets = _inputs((6, 16, 50), torch.float32, device)
    targets = torch.full_like(targets, IGNORE_INDEX)
    assert torch.isnan(SPEC.reference(hidden, weight, targets))
    assert torch.isnan(KERNEL.kernel_fn(hidden, weight, targets))


def test_ignored_rows_do_not_change_the_loss(device) -> None:
    hidden, weight, targets = _inputs((5, 16, 70), torch.float32, device)
    junk = torch.full((3, 16), 1.0e3, device=device)
    padded = torch.cat([hidden, junk]), torch.cat(
        [targets, torch.full((3,), IGNORE_INDEX, device=device)])
    assert torch.equal(KERNEL.kernel_fn(hidden, weight, targets),
                       KERNEL.kernel_fn(padded[0], weight, padded[1]))


def test_rejects_mismatched_shapes(device) -> None:
    hidden, weight, targets = _inputs((6, 16, 50), torch.float32, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(hidden, weight, targets[:5])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(hidden, weight[:, :8], targets)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(hidden, weight.half(), targets)


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((33, 40, 300), torch.bfloat16, device))


def test_writes_every_output_element(device) -> None:
    args = _inputs((9, 24, 200), torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, "over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("linear_cross_entropy", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("linear_cross_entropy")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checked by the GPU tests")
def test_launches_compile_for_hopper(tmp_path: Path) -> None:
    """What the starter launches builds for sm_90 without register spills (Triton's compiler,
    no GPU). Recorded on CPU tensors, so the tiles are the interpreter's upcast variant."""
    calls = [((64, 128, 1000), torch.bfloat16), ((33, 70, 300), torch.float32)]
    problems = hopper_compile_problems("linear_cross_entropy", [{}], calls, tmp_path,
                                       forbid_spills=True)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The profiler's pattern


def _plan(tmp_path: Path, source: str) -> Any:
    path = tmp_path / "model.py"
    path.write_text(source)
    loaded = load_model_file(path, device="cpu")
    return build_plan(profile_model(loaded, warmup=1, iters=3), model="m", class_name="Model")


HEAD_AND_LOSS = '''
import torch
import torch.nn.functional as F
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(16, 120, bias={bias})

    def forward(self, h, t):
        logits = self.lm_head(h)
        return {loss}

def get_inputs():
    return [torch.randn(2, 10, 16), torch.randint(0, 120, (2, 10))]
'''


@pytest.mark.parametrize("bias, loss, route", [
    (False, "F.cross_entropy(logits.view(-1, 120), t.view(-1))", "call chain"),
    (True, "F.cross_entropy(logits.view(-1, 120), t.view(-1))", "no: the LM head has a bias"),
    (False, "F.nll_loss(F.log_softmax(logits.view(-1, 120).float(), -1), t.view(-1))",
     "no: log_softmax + nll_loss (only F.cross_entropy is routed)"),
    (False, "F.cross_entropy(logits.view(-1, 120), t.view(-1), reduction='sum')",
     "no: reduction=sum"),
], ids=["cross_entropy", "bias", "log_softmax_nll", "sum"])
def test_the_profiler_claims_head_and_loss_as_one_call(bias, loss, route, tmp_path) -> None:
    plan = _plan(tmp_path, HEAD_AND_LOSS.format(bias=bias, loss=loss))
    (target,) = plan.targets  # the linear and the loss are one target, no matmul, no softmax
    assert target.kernel_type == "linear_cross_entropy" and target.calls == 1
    assert tuple(target.bench_shape) == (20, 16, 120)
    assert target.route == route
    # Both parts' time: the head alone is about 0.6 of this forward on the CPU, both parts 0.9-1.0
    # (views and the float cast aside, whose share grows on a busy machine).
    assert target.share > 0.8


def test_a_head_whose_logits_are_used_otherwise_stays_a_matmul(tmp_path) -> None:
    plan = _plan(tmp_path, HEAD_AND_LOSS.format(
        bias=False, loss="logits.softmax(-1).sum()"))
    assert "linear_cross_entropy" not in {t.kernel_type for t in plan.targets}


# ---------------------------------------------------------------------------------------------
# Routing: the head's logits deferred into the loss


def _kernel(shape: tuple[int, ...] = (), sites: tuple[str, ...] = ()) -> RoutedKernel:
    entry = {"tag": "01_linear_cross_entropy", "kernel_type": "linear_cross_entropy",
             "role": "", "dtypes": [dtype_name(d) for d in SPEC.dtypes], "params": {},
             "sites": list(sites), "limits": {}, "shape": list(shape),
             "tolerances": {dtype_name(d): [t.atol, t.rtol] for d, t in SPEC.tolerances.items()}}
    source = starter_path("linear_cross_entropy").read_text()
    (kernel,) = build_kernels([entry], {entry["tag"]: source}, {},
                              {"linear_cross_entropy": get_integration("linear_cross_entropy")},
                              DEVICE, "test_lce")
    return kernel


def _fixture_model() -> tuple[nn.Module, list[torch.Tensor]]:
    loaded = load_model_file(MODELS / "linear_cross_entropy.py", device=DEVICE)
    return loaded.model, list(loaded.inputs)


def test_patched_loss_and_gradients_match_eager() -> None:
    model, (hidden, targets) = _fixture_model()
    hidden = hidden.requires_grad_(True)
    expected = model(hidden, targets)
    expected_grads = torch.autograd.grad(expected, [hidden, model.lm_head.weight,
                                                    model.norm.weight])
    patch = patch_model(model, [_kernel(shape=(24, 32, 200))])
    try:
        routed = model(hidden, targets)
        grads = torch.autograd.grad(routed, [hidden, model.lm_head.weight, model.norm.weight])
    finally:
        patch.unpatch()
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 1 and not stats.fallbacks, stats.summary()
    assert routed.dtype == expected.dtype
    torch.testing.assert_close(routed, expected, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


class HeadLossAndLogits(nn.Module):
    """A forward that uses its logits twice: the loss, then returns them too."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.head = nn.Linear(16, 40, bias=False)

    def forward(self, h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(self.proj(h))
        loss = F.cross_entropy(logits.reshape(-1, 40), t.reshape(-1))
        smoothed = F.cross_entropy(logits.reshape(-1, 40), t.reshape(-1), label_smoothing=0.1)
        return loss, smoothed, logits


def test_other_uses_compute_the_logits_as_written_and_are_counted() -> None:
    torch.manual_seed(0)
    model = HeadLossAndLogits().to(DEVICE)
    h = torch.randn(3, 5, 16, device=DEVICE)
    t = torch.randint(0, 40, (3, 5), device=DEVICE)
    with torch.no_grad():
        expected = model(h, t)
        patch = patch_model(model, [_kernel(shape=(15, 16, 40))])
        try:
            routed = model(h, t)
        finally:
            patch.unpatch()
    for got, want in zip(routed, expected):
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (stats,) = patch.report.kernels.values()
    # The first loss is the kernel's; the proj layer (another weight shape) is never deferred;
    # the smoothed loss computes the logits once (returned, they are the same values): one
    # fallback, for the first reason.
    assert stats.calls == 1
    assert stats.fallbacks == {"LM head logits also computed: loss with class weights, "
                               "smoothing or legacy arguments": 1}


def test_a_head_with_a_bias_is_left_to_pytorch() -> None:
    head = nn.Linear(16, 40).to(DEVICE)

    class WithBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = head

        def forward(self, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self.head(h), t)

    model = WithBias()
    h, t = torch.randn(6, 16, device=DEVICE), torch.randint(0, 40, (6,), device=DEVICE)
    expected = model(h, t)
    patch = patch_model(model, [_kernel(shape=(6, 16, 40))])
    try:
        torch.testing.assert_close(model(h, t), expected)
    finally:
        patch.unpatch()
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 0 and stats.fallbacks == {"LM head has a bias": 1}


# ---------------------------------------------------------------------------------------------
# Memory: the fused path never allocates the [N, V] logits


class Allocations(TorchDispatchMode):
    """The element count of every tensor an aten op returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.sizes.append(t.numel())
        return out


def test_the_fused_forward_and_backward_never_hold_the_logits() -> None:
    n, d, v = 64, 8, 256
    hidden, weight, targets = _inputs((n, d, v), torch.float32, DEVICE)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    kernel = _kernel(shape=(n, d, v))
    with Allocations() as eager:
        F.cross_entropy(F.linear(hidden, weight), targets).backward()
    assert max(eager.sizes) >= n * v  # the measurement sees the eager logits
    with Allocations() as fused:
        kernel.op.op(hidden, weight, targets).backward()
    # Forward: O(N) partials; backward: chunks of rows whose logits are about the hidden's size.
    assert max(fused.sizes) <= max(n * d, v * d) < n * v // 4, sorted(fused.sizes)[-3:]


def test_a_matmul_kernel_leaves_the_lm_head_to_the_fused_loss() -> None:
    """Both kernels loaded: matmul's module route takes every nn.Linear but the head whose
    F.linear the fused loss defers (it would otherwise never see the head), and says so."""
    from test_patch import build, entry

    torch.manual_seed(0)
    model = HeadLossAndLogits().to(DEVICE)
    h = torch.randn(3, 5, 16, device=DEVICE)
    t = torch.randint(0, 40, (3, 5), device=DEVICE)
    with torch.no_grad():
        expected = model(h, t)[0]
        (matmul,) = build(entry("matmul", role="linear", tag="02_matmul"))
        patch = patch_model(model, [matmul, _kernel(shape=(15, 16, 40))])
        try:
            routed = model(h, t)[0]
        finally:
            patch.unpatch()
    torch.testing.assert_close(routed, expected, atol=1e-5, rtol=1e-5)
    stats = patch.report.kernels
    assert stats["02_matmul"].modules == ["proj"]
    assert stats["02_matmul"].skipped == {"head": "left to linear_cross_entropy"}
    assert stats["01_linear_cross_entropy"].calls == 1
