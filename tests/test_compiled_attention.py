"""Explicit attention under torch.compile: the delivered compile modes (and verify's compile-mode
ablation, through the same `compile_with_kernels`) put the routed flash_attention kernel's op into
the graph Inductor compiles, in place of softmax(q @ kᵀ · scale) @ v; look-alikes the kernel does
not compute compile as written.

Inductor compiles for the CPU here (its C++ backend): a few seconds per test, at tiny shapes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.compiled_attention import AttentionChainPass
from autokernel.integrate.delivery import Delivery, compile_with_kernels, deliver
from autokernel.integrate.patch import patch_model
from conftest import DEVICE
from test_patch import build, entry

BATCH, HEADS, SEQ, HEAD_DIM, WIDTH = 2, 2, 8, 16, 32


class VitSelfAttention(nn.Module):
    """As examples/models/vit_encoder.py writes it: q, k, v views of one fused qkv projection,
    `* self.scale`, softmax over the last dim."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = HEAD_DIM ** -0.5
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * self.scale
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class Attention(nn.Module):
    """Attention over given q, k, v, written as `spelling` says."""

    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.spelling = spelling
        self.dropout = nn.Dropout(0.1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.spelling == "bert":  # / sqrt(d), F.softmax, dropout (eval: does nothing)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            return torch.matmul(self.dropout(F.softmax(scores, dim=-1)), v)
        if self.spelling == "hf_upcast":  # softmax in fp32, back to v's dtype; scale 0.5
            scores = torch.matmul(q, k.transpose(2, 3)) * 0.5
            return torch.matmul(F.softmax(scores.float(), dim=-1).type_as(v), v)
        if self.spelling == "additive_bias":
            scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            return (scores + torch.linspace(-1, 0, q.shape[-2], device=q.device)).softmax(-1) @ v
        if self.spelling == "other_dim":
            scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            return scores.softmax(dim=-2) @ v
        if self.spelling == "returns_weights":
            probs = ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1)
            return probs @ v + probs.sum()
        raise AssertionError(self.spelling)


def flash_kernel(causal: bool = False, scale: float | None = None) -> Any:
    (kernel,) = build(entry("flash_attention", params={"causal": causal, "scale": scale},
                            sites=("",)))
    return kernel


def qkv_inputs(device: str) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=generator).to(device)
            for _ in range(3)]


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    """Dynamo reset, and Inductor's caches off: a cached graph skips the pass, whose counters
    the tests read."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def compiled_code(compiled: Any, *inputs: torch.Tensor) -> tuple[Any, str]:
    """The compiled forward's output and the code Inductor generated for it."""
    from torch._inductor.utils import run_and_get_code

    with torch.no_grad():
        out, code = run_and_get_code(compiled, *inputs)
    return out, "\n".join(code)


def op_name(kernel: Any) -> str:
    return kernel.op.qualname.split("::")[-1]


def test_delivered_compile_runs_the_vit_attention_chain_as_the_kernel_op(device: str) -> None:
    kernel = flash_kernel(scale=HEAD_DIM ** -0.5)
    model = VitSelfAttention().to(device).eval()
    x = torch.randn(BATCH, SEQ, WIDTH, generator=torch.Generator().manual_seed(5)).to(device)
    with torch.no_grad():
        expected = model(x)
    delivered = deliver(model, [kernel], Delivery("compile", (kernel.tag,)))
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0
    torch._dynamo.reset()
    out, code = compiled_code(delivered.model, x)
    assert op_name(kernel) in code  # the kernel's op is called by the compiled forward
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spelling", ["bert", "hf_upcast"])
def test_the_chain_spellings_of_encoders_compile_to_the_kernel_op(spelling: str,
                                                                  device: str) -> None:
    scale = 0.5 if spelling == "hf_upcast" else None
    kernel = flash_kernel(scale=scale)
    model = Attention(spelling).to(device).eval()
    inputs = qkv_inputs(device)
    with torch.no_grad():
        expected = model(*inputs)
    patch = patch_model(model, [kernel], under_compile="kernels")
    compiled = compile_with_kernels(model, patch)
    out, code = compiled_code(compiled, *inputs)
    assert op_name(kernel) in code
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spelling, causal, reason", [
    ("additive_bias", False, None),
    ("other_dim", False, None),
    ("returns_weights", False, None),
    ("bert", True, "causal=False (verified: True)"),
], ids=["additive_bias", "softmax_over_dim_2", "weights_used_again", "causal_kernel"])
def test_look_alikes_compile_as_written(spelling: str, causal: bool, reason: str | None,
                                        device: str) -> None:
    """Compared with plain torch.compile, not eager: torch 2.13's own fuse_attention turns
    softmax(dim=-2) @ v into SDPA over the last dim (a wrong result, Inductor's, pass or not)."""
    kernel = flash_kernel(causal=causal)
    model = Attention(spelling).to(device).eval()
    inputs = qkv_inputs(device)
    with torch.no_grad():
        expected = torch.compile(model)(*inputs)
    torch._dynamo.reset()
    attention_pass = AttentionChainPass([kernel])
    compiled = torch.compile(model, options={"pre_grad_custom_pass": attention_pass})
    out, code = compiled_code(compiled, *inputs)
    assert op_name(kernel) not in code and attention_pass.replaced == 0
    assert attention_pass.left == ({reason: 1} if reason else {})
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


def test_only_kernels_routed_into_compiled_graphs_replace_chains(device: str) -> None:
    """`under_compile="inductor"` leaves every kernel out of compiled graphs: no pass then."""
    kernel = flash_kernel()
    model = Attention("bert").to(device).eval()
    patch = patch_model(model, [kernel], under_compile="inductor")
    out, code = compiled_code(compile_with_kernels(model, patch), *qkv_inputs(device))
    assert op_name(kernel) not in code


def test_the_pass_is_part_of_the_exported_module() -> None:
    from autokernel.integrate.export import INLINED_MODULES

    names = list(INLINED_MODULES)
    assert names.index("integrate/compiled_attention.py") < names.index("integrate/delivery.py")


@pytest.mark.gpu
def test_on_a_gpu_the_compiled_vit_attention_calls_the_triton_op() -> None:
    kernel = flash_kernel(scale=HEAD_DIM ** -0.5)
    model = VitSelfAttention().cuda().half().eval()
    x = torch.randn(BATCH, SEQ, WIDTH, device="cuda", dtype=torch.half)
    with torch.no_grad():
        expected = model(x)
    for mode in ("compile", "reduce-overhead"):
        torch._dynamo.reset()
        delivered = deliver(model, [kernel], Delivery(mode, (kernel.tag,)))
        out, code = compiled_code(delivered.model, x)
        delivered.patch.unpatch()
        # a triton_op is opened into its launches, a custom_op called by name
        assert op_name(kernel) in code or "flash" in code.lower()
        torch.testing.assert_close(out, expected, atol=2e-3, rtol=2e-3)
    assert DEVICE == "cuda"
