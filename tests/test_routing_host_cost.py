"""The host cost of a patched eager forward: what the Router's torch-function mode pays per call.

A fused add + norm kernel's call sites include the model itself (the pair straddles blocks), so
its mode is on for the whole forward and sees every torch call in it. These tests count, instead
of timing (CI machines are noisy), that it sees only the model's own calls: not the routed
kernel's host code (allocations, shape reads, the launch), and no Python round trip through
torch's function handling for the blocks' adds on the fused kernel's h.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from autokernel.integrate import residual_norm
from autokernel.integrate.custom_ops import _unaliased
from autokernel.integrate.patch import RoutedKernel, Router, patch_model
from test_patch import build, entry

WIDTH, BLOCKS = 16, 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(WIDTH, eps=1e-5)
        self.mix = nn.Linear(WIDTH, WIDTH, bias=False)
        self.norm2 = nn.RMSNorm(WIDTH, eps=1e-5)
        self.mlp = nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.mix(self.norm1(x))
        return h + self.mlp(self.norm2(h))


class PreNorm(nn.Module):
    """Every norm but the first takes a residual add's result, across block boundaries."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = nn.RMSNorm(WIDTH, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class CountingMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def busy_host_code(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                   eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused op in PyTorch, with the torch calls a kernel file's host code makes before its
    launch (shape and dtype checks, allocations, strides, pointers)."""
    if x.shape != residual.shape or x.dtype != residual.dtype or x.ndim == 0:
        raise ValueError("mismatched inputs")
    y, h = torch.empty_like(x), torch.empty_like(x)
    for t in (x, residual, weight, y, h):
        t.data_ptr(), t.stride(0), t.is_cuda
    torch.add(x, residual, out=h)
    y.copy_(torch.rms_norm(h, (x.shape[-1],), weight, eps))
    return y, h


@pytest.fixture(scope="module")
def fused_kernel() -> RoutedKernel:
    """add_rmsnorm with the whole model as its call site, running `busy_host_code` directly."""
    kernel, = build(entry("add_rmsnorm", sites=("",), tag="01_add_rmsnorm"))
    return dataclasses.replace(kernel, op=dataclasses.replace(kernel.op, direct=busy_host_code))


def test_the_router_sees_the_model_calls_only_not_the_kernel_host_code(
        fused_kernel: RoutedKernel, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = PreNorm().eval()
    x = torch.randn(2, 3, WIDTH)
    counting = CountingMode()
    with torch.no_grad():
        with counting:
            expected = model(x)
    patch = patch_model(model, [fused_kernel])
    seen = Counter[str]()
    route = Router.__torch_function__

    def counted(self: Router, func: Any, types: Any, args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None) -> Any:
        seen[getattr(func, "__name__", repr(func))] += 1
        return route(self, func, types, args, kwargs)

    monkeypatch.setattr(Router, "__torch_function__", counted)
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        patch.unpatch()
    stats = patch.report.kernels["01_add_rmsnorm"]
    assert stats.calls == 2 * BLOCKS and not stats.fallbacks  # every norm but the first fused
    torch.testing.assert_close(out, expected)
    # Each fused pair takes the place of the norm's own torch calls and adds none of its host
    # code's (~20 per kernel call when those ran inside the mode).
    assert sum(seen.values()) < counting.calls, seen
    assert not {"empty_like", "data_ptr", "stride", "copy_"} & set(seen), seen


def test_adds_on_the_fused_kernels_h_skip_torch_function_handling(
        fused_kernel: RoutedKernel, monkeypatch: pytest.MonkeyPatch) -> None:
    """`h + mlp(norm2(h))` on a settled stand-in is the add on the kernel's h, directly."""
    torch.manual_seed(0)
    model = PreNorm().eval()
    x = torch.randn(2, 3, WIDTH)
    with torch.no_grad():
        expected = model(x)
    round_trips = []
    handle = residual_norm.handle_torch_function

    def counted(*args: Any, **kwargs: Any) -> Any:
        round_trips.append(args[0])
        return handle(*args, **kwargs)

    monkeypatch.setattr(residual_norm, "handle_torch_function", counted)
    patch = patch_model(model, [fused_kernel])
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        patch.unpatch()
    assert patch.report.kernels["01_add_rmsnorm"].calls == 2 * BLOCKS
    assert round_trips == []
    torch.testing.assert_close(out, expected)


def test_unaliased_copies_only_outputs_sharing_a_storage() -> None:
    x, residual = torch.randn(4, 8), torch.randn(4, 8)
    # Values, not empty_like: uninitialised memory may hold a NaN, which torch.equal never
    # finds equal to itself (this test failed CI at random).
    y, h = torch.randn(4, 8), torch.randn(4, 8)
    kept = _unaliased((y, h), (x, residual, 1e-5))
    assert kept[0] is y and kept[1] is h
    view, twice = _unaliased((x.view(-1), y), (x, residual))[0], _unaliased((y, y), (x,))
    assert view.data_ptr() != x.data_ptr() and torch.equal(view, x.view(-1))
    assert twice[0] is y and twice[1] is not y and torch.equal(twice[1], y)
    empty = torch.empty(0)
    assert _unaliased(empty, (empty,)) is empty


def test_the_alias_check_passes_tensors_without_a_real_storage() -> None:
    """Inductor runs a routed op on functional tensors while it compiles, and their storage
    raises on data_ptr(): the check leaves such an output as it is (seen on an H200: a patched
    model failed torch.compile with 'invalid python storage')."""
    from autokernel.integrate.custom_ops import _unaliased

    functional = torch._to_functional_tensor(torch.empty(4))
    real = torch.empty(4)
    assert _unaliased(real, (functional,)) is real
    assert _unaliased(functional, (real,)) is functional
