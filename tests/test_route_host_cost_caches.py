"""What issue 25's host-cost work keeps between routed calls, and that it refuses what it refused.

The cross_entropy route's plan reads its arguments by position and casts the kernel's float32
loss to the logits' dtype; the LM head + loss route shares meta tensors by shape and keeps the
stand-in's shape and dtype as plain values, so that the model's `logits.shape[-1]` is no torch
call through the Router. Each cache is checked to be reused, and a changed guard input (a
keyword the kernel does not take, a dtype it was not verified in, a gradient) to be refused or
planned anew, never served by the earlier decision. Kernels are stubs (PyTorch in place of the
kernel function): nothing here runs the Triton interpreter.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate import logits_chain
from autokernel.integrate.patch import RoutedKernel, Router, patch_model
from autokernel.integrate.plans import argument_runner
from test_patch import build, entry
from test_route_plans import stubbed


def test_argument_runner_reads_each_argument_where_the_signature_holds_it() -> None:
    def call(*args: Any) -> tuple[Any, ...]:
        return args

    names = ("input", "dim", "dtype")
    # By position: read straight from the call's arguments, trailing constants after them.
    run = argument_runner(call, names, ("x", -1), ("input",))
    assert run(("y", -1), {}) == ("y",)
    run = argument_runner(call, names, ("x", -1), ("input", "dim"), "extra")
    assert run(("y", 0), {}) == ("y", 0, "extra")
    # A keyword argument: read by name, in the order wanted.
    run = argument_runner(call, names, ("x",), ("input", "dim"))
    assert run(("y",), {"dim": 1}) == ("y", 1)
    run = argument_runner(call, names, (), ("dim", "input"), None)
    assert run((), {"input": "y", "dim": 2}) == (2, "y", None)


class Loss(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor, **options: Any) -> Any:
        return F.cross_entropy(logits, targets, **options)


@pytest.fixture(scope="module")
def cross_entropy_kernel() -> RoutedKernel:
    kernel, = build(entry("cross_entropy", sites=("",)))
    return kernel


def float32_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), targets)  # the kernel's loss is float32


def test_a_cross_entropy_plan_is_reused_and_a_changed_guard_is_refused(
        cross_entropy_kernel: RoutedKernel) -> None:
    kernel, calls = stubbed(cross_entropy_kernel, float32_loss)
    model = Loss()
    patch = patch_model(model, [kernel])
    (_, _, _, _, plans), = patch.router.routes[F.cross_entropy]
    stats = patch.report.kernels[kernel.tag]
    torch.manual_seed(0)
    logits, targets = torch.randn(6, 10, dtype=torch.bfloat16), torch.randint(0, 10, (6,))
    with torch.no_grad():
        for _ in range(3):
            out = model(logits, targets)
            # F.cross_entropy's dtype: the kernel's float32 loss cast to the logits'
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out, F.cross_entropy(logits, targets))
        assert len(plans) == 1 and calls["direct"] == 3 and stats.calls == 3
        # A keyword the kernel does not implement: refused on every call, with its reason, and
        # computed by PyTorch, though the tensors' signature is the one already planned.
        for _ in range(2):
            torch.testing.assert_close(model(logits, targets, ignore_index=3),
                                       F.cross_entropy(logits, targets, ignore_index=3))
        assert stats.fallbacks == {"ignore_index or reduction": 2}
        # A dtype the kernel was not verified in: refused too.
        double = logits.double()
        torch.testing.assert_close(model(double, targets), F.cross_entropy(double, targets))
        assert stats.fallbacks["dtype float64 not verified"] == 1
        assert len(plans) == 3 and calls["direct"] == 3
    # Logits that need a gradient, with grad on: another plan, through the registered op.
    wanted = logits.float().requires_grad_(True)
    out = model(wanted, targets)
    assert out.requires_grad and calls["registered"] == 1 and len(plans) == 4
    patch.unpatch()


VOCAB, WIDTH, ROWS = 40, 16, 6


class Head(nn.Module):
    """An LM head and its loss as models write them, the vocabulary read off the logits."""

    def __init__(self, cast: bool = False) -> None:
        super().__init__()
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.cast = cast

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(h)
        if self.cast:
            logits = logits.float()
            assert logits.dtype == torch.float32  # the stand-in's, after the cast
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def head_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy((hidden @ weight.t()).float(), targets)


@pytest.fixture(scope="module")
def head_kernel() -> RoutedKernel:
    kernel, = build(entry("linear_cross_entropy", sites=("",), shape=(ROWS, WIDTH, VOCAB)))
    return kernel


class SeenByRouter:
    """The torch functions the Router's mode is handed, while on."""

    def __init__(self) -> None:
        self.funcs: list[Any] = []
        self.original = Router.__torch_function__

    def __enter__(self) -> SeenByRouter:
        original, funcs = self.original, self.funcs

        def spy(router: Router, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            funcs.append(func)
            return original(router, func, types, args, kwargs)

        Router.__torch_function__ = spy  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        Router.__torch_function__ = self.original  # type: ignore[method-assign]


@pytest.mark.parametrize("cast", [False, True])
def test_the_stand_ins_shape_is_no_torch_call_and_meta_tensors_are_shared(
        head_kernel: RoutedKernel, cast: bool) -> None:
    kernel, calls = stubbed(head_kernel, head_loss)
    torch.manual_seed(0)
    model = Head(cast).to(torch.bfloat16)
    hidden = torch.randn(ROWS, WIDTH, dtype=torch.bfloat16)
    targets = torch.randint(0, VOCAB, (ROWS,))
    with torch.no_grad():
        expected = model(hidden, targets)
        patch = patch_model(model, [kernel])
        try:
            with SeenByRouter() as seen:
                got = model(hidden, targets)
            metas = dict(logits_chain.LOGITS_METAS)
            again = model(hidden, targets)
        finally:
            patch.unpatch()
    stats = patch.report.kernels[kernel.tag]
    assert stats.calls == 2 and not stats.fallbacks and calls["direct"] == 2
    # The model's own calls only: no attribute read of a tensor of ours (`logits.shape`).
    steps = [torch.Tensor.float] if cast else []
    assert seen.funcs == [F.linear, *steps, torch.Tensor.view, torch.Tensor.view,
                          F.cross_entropy]
    # The loss in the logits' dtype (float32 after a cast), as F.cross_entropy gives it.
    assert got.dtype == expected.dtype == (torch.float32 if cast else torch.bfloat16)
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(again, got)
    # The second call reused the first one's meta tensor: no new entry, the same object.
    key = ((ROWS, VOCAB), torch.bfloat16)
    assert logits_chain.LOGITS_METAS == metas and metas[key] is logits_chain.LOGITS_METAS[key]


def test_the_meta_cache_is_bounded_and_a_new_shape_gets_its_own_meta() -> None:
    saved = dict(logits_chain.LOGITS_METAS)
    logits_chain.LOGITS_METAS.clear()
    try:
        first = logits_chain._logits_meta((3, 5), torch.float16)
        assert logits_chain._logits_meta((3, 5), torch.float16) is first
        other = logits_chain._logits_meta((4, 5), torch.float16)
        assert other.shape == (4, 5) and other.device.type == "meta"
        assert logits_chain._logits_meta((3, 5), torch.float32).dtype == torch.float32
        for rows in range(logits_chain.MAX_LOGITS_METAS + 10):
            meta = logits_chain._logits_meta((rows, 7), torch.float16)
            assert meta.shape == (rows, 7)  # served beyond the bound, just not kept
        assert len(logits_chain.LOGITS_METAS) == logits_chain.MAX_LOGITS_METAS
    finally:
        logits_chain.LOGITS_METAS.clear()
        logits_chain.LOGITS_METAS.update(saved)


def test_a_meta_step_is_reused_on_the_same_meta_and_refusals_are_not_kept() -> None:
    saved = dict(logits_chain.LOGITS_STEPS)
    logits_chain.LOGITS_STEPS.clear()
    try:
        meta = logits_chain._logits_meta((2, 3, 5), torch.float16)
        view = torch.Tensor.view
        first = logits_chain._meta_step(view, meta, (-1, 5), {})
        assert first is not None and first.shape == (6, 5)
        assert logits_chain._meta_step(view, meta, (-1, 5), {}) is first
        # Other arguments, another meta of the same shape: steps of their own.
        assert logits_chain._meta_step(view, meta, (3, 10), {}).shape == (3, 10)
        twin = torch.empty((2, 3, 5), dtype=torch.float16, device="meta")
        assert logits_chain._meta_step(view, twin, (-1, 5), {}) is not first
        # A step torch refuses is None, every time, and nothing is kept for it.
        kept = len(logits_chain.LOGITS_STEPS)
        assert logits_chain._meta_step(view, meta, (-1, 7), {}) is None
        assert len(logits_chain.LOGITS_STEPS) == kept
        # An index with a slice has no signature: made every time, still right.
        index = (slice(None, -1), Ellipsis)
        assert logits_chain._meta_step(torch.Tensor.__getitem__, meta, (index,), {}).shape \
            == (1, 3, 5)
        assert len(logits_chain.LOGITS_STEPS) == kept
    finally:
        logits_chain.LOGITS_STEPS.clear()
        logits_chain.LOGITS_STEPS.update(saved)
