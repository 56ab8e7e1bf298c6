"""Routing a GeGLU MLP to fused_mlp: the module probe takes a gated MLP only for the activation
the kernel was verified with (SiLU, exact GELU or GELU's tanh form), gradients included."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE
from test_patch import build, entry
from torch import nn

from autokernel.integrate.patch import patch_model

D, HIDDEN = 32, 48
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with the activation an inline function, as LLaMA and T5 write
    it, or an activation module child, as Gemma's act_fn is."""

    def __init__(self, activation: str, as_module: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(D, HIDDEN, bias=False)
        self.up_proj = nn.Linear(D, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, D, bias=False)
        if activation == "silu":
            self.act_fn: Any = nn.SiLU() if as_module else F.silu
        else:
            approximate = "tanh" if activation == "gelu_tanh" else "none"
            self.act_fn = nn.GELU(approximate=approximate) if as_module else \
                (lambda g: F.gelu(g, approximate=approximate))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class ThreeMLPs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.silu = GatedMLP("silu")
        self.gelu = GatedMLP("gelu")
        self.gelu_tanh = GatedMLP("gelu_tanh", as_module=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu_tanh(self.gelu(self.silu(x)))


def fused_mlp_kernel(activation: str | None) -> Any:
    """The Triton starter registered as a finished run's fused_mlp; None: a manifest from before
    GeGLU, which names no activation."""
    manifest = entry("fused_mlp", params={} if activation is None else {"activation": activation})
    if activation is None:
        manifest["params"].pop("activation", None)
    kernel, = build(manifest)
    return kernel


@pytest.mark.parametrize("as_module", [False, True], ids=["inline", "act_module"])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_a_geglu_mlp_runs_the_kernel_and_matches_eager_with_gradients(activation: str,
                                                                      as_module: bool) -> None:
    torch.manual_seed(0)
    eager = GatedMLP(activation, as_module).to(DEVICE)
    patched = copy.deepcopy(eager)
    patch = patch_model(patched, [fused_mlp_kernel(activation)])
    assert patch.report.kernels["01_fused_mlp"].modules == [""]
    x = torch.randn(2, 5, D, device=DEVICE)

    def run(model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        leaf = x.clone().requires_grad_(True)
        out = model(leaf)
        out.square().mean().backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        grads["input"] = leaf.grad
        return out.detach(), grads

    (expected, expected_grads), (routed, routed_grads) = run(eager), run(patched)
    assert patch.report.calls == 1 and not patch.report.kernels["01_fused_mlp"].fallbacks
    torch.testing.assert_close(routed, expected, atol=1e-4, rtol=1e-4)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(routed_grads[name], grad, atol=1e-4, rtol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("activation", [*ACTIVATIONS, None], ids=[*ACTIVATIONS, "pre_geglu"])
def test_a_kernel_takes_only_the_mlps_of_its_activation(activation: str | None) -> None:
    """fp32's probe tells all three apart (exact and tanh GELU differ by ~2e-4 relative, twice
    fp32's rtol); a manifest that names no activation is SwiGLU's."""
    torch.manual_seed(0)
    model = ThreeMLPs().to(DEVICE)
    x = torch.randn(2, 5, D, device=DEVICE)
    with torch.no_grad():
        expected = model(x)
    patch = patch_model(model, [fused_mlp_kernel(activation)])
    taken = activation or "silu"
    stats = patch.report.kernels["01_fused_mlp"]
    assert stats.modules == [taken]
    for name in set(ACTIVATIONS) - {taken}:
        assert stats.skipped[name] == f"probe: does not compute down({taken}(gate(x)) · up(x))"
    with torch.no_grad():
        routed = model(x)
    assert patch.report.calls == 1
    torch.testing.assert_close(routed, expected, atol=1e-4, rtol=1e-4)
