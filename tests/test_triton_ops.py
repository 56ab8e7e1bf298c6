"""Compile-transparent kernels (issue 14): starters registered as `torch.library.triton_op`.

On the CPU the kernels run in the Triton interpreter, whose `InterpretedFunction`s wrap_triton
cannot capture; so here the triton_op path is checked in eager mode (outputs and gradients equal
the custom_op path's), under Dynamo's graph capture (backend="eager", fullgraph: no break), and
its host-code trace (make_fx on fake tensors, kernels decorated with the interpreter off: the
graph holds the wrap_triton launches, nothing runs). Inductor's codegen of those launches needs a
GPU: the `gpu` tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn

from autokernel.integrate.custom_ops import choose_compile_path, load_kernel_module
from autokernel.integrate.patch import build_kernels, patch_model
from autokernel.integrate.triton_ops import (
    CUSTOM_OP, TRITON_OP, TRANSPARENT_LABEL, traceable_body, untraceable_reason,
)
from autokernel.kernels import starter_path
from autokernel.ops import KERNEL_TYPES, get_integration, get_spec
from autokernel.reference import REFERENCES
from conftest import DEVICE
from test_patch import entry, integrations

TYPES = ("rmsnorm", "softmax", "gelu", "reduce")
MODEL_TYPES = ("rmsnorm", "softmax", "gelu")  # the ones Block below calls


def tiny_args(kernel_type: str, grad: bool = False) -> tuple[Any, ...]:
    generator = torch.Generator().manual_seed(7)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(DEVICE).requires_grad_(grad)

    return {"rmsnorm": lambda: (r(3, 16), r(16), 1e-5), "softmax": lambda: (r(3, 16),),
            "gelu": lambda: (r(3, 16), "tanh"), "reduce": lambda: (r(3, 16),)}[kernel_type]()


def registered(kernel_type: str, transparent: bool, prefix: str) -> Any:
    e = entry(kernel_type, tag=f"01_{kernel_type}")
    [kernel] = build_kernels([e], {e["tag"]: starter_path(kernel_type).read_text()}, REFERENCES,
                             integrations([e]), DEVICE, prefix, compile_transparent=transparent)
    return kernel


@pytest.mark.parametrize("kernel_type", TYPES)
def test_triton_op_matches_the_custom_op_in_outputs_and_gradients(kernel_type: str) -> None:
    transparent = registered(kernel_type, True, "tt_transparent")
    opaque = registered(kernel_type, False, "tt_opaque")
    assert transparent.op.compile_path == TRITON_OP and opaque.op.compile_path == CUSTOM_OP
    assert transparent.op.qualname != opaque.op.qualname
    args = tiny_args(kernel_type, grad=True)
    outs = [k.op.op(*args) for k in (transparent, opaque)]
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    torch.testing.assert_close(outs[0], get_spec(kernel_type).reference(*args),
                               atol=1e-4, rtol=1e-4)
    leaves = [a for a in args if isinstance(a, torch.Tensor)]
    direction = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(1))
    grads = [torch.autograd.grad(out, leaves, direction.to(out)) for out in outs]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.library.opcheck(transparent.op.op, args, test_utils=(
        "test_schema", "test_autograd_registration", "test_faketensor"))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(16, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.norm(x) * 2.0, approximate="tanh")
        return torch.softmax(h + 1.0, dim=-1)


def test_a_patched_model_captures_the_triton_ops_in_one_graph() -> None:
    import torch._dynamo

    kernels = [registered(t, True, "tt_graph") for t in MODEL_TYPES]
    kernels[2].params["approximate"] = "tanh"
    model = Block().to(DEVICE)
    x = torch.randn(4, 3, 16, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    with torch.no_grad():
        expected = model(x)
    patch = patch_model(model, kernels, under_compile="transparent")
    lines = patch.report.lines()
    assert all(TRANSPARENT_LABEL in line and "in compiled graphs" in line for line in lines), lines
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes}
    assert {k.op.qualname.replace("::", ".") + ".default" for k in kernels} <= ops, ops
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), expected, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()


@contextmanager
def jit_not_interpreted() -> Iterator[None]:
    """Kernel modules loaded inside get real `JITFunction`s (decorating needs no GPU)."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def jit_module(name: str, source: str) -> Any:
    with jit_not_interpreted():
        return load_kernel_module(name, source, f"<{name}>")


@pytest.mark.parametrize("kernel_type", TYPES)
def test_the_starters_host_code_traces_into_wrap_triton_launches(kernel_type: str) -> None:
    """The rmsnorm starter plans launches in an lru_cache and launches precompiled kernels;
    traced, its caches are bypassed and its kernels launch through wrap_triton."""
    from torch.fx.experimental.proxy_tensor import make_fx

    module = jit_module(f"tt_jit_{kernel_type}", starter_path(kernel_type).read_text())
    body = traceable_body(module.kernel_fn, module)
    args = tiny_args(kernel_type)
    graph = make_fx(body, tracing_mode="fake")(*args)
    launches = [n for n in graph.graph.nodes if "triton_kernel_wrapper" in str(n.target)]
    assert len(launches) == 1
    example = get_integration(kernel_type).example(torch.float16)
    assert untraceable_reason(body, example) is None
    with jit_not_interpreted():  # the automatic choice, as on a GPU machine
        assert choose_compile_path(module.kernel_fn, module, get_integration(kernel_type), "cpu",
                                   None, torch.float16) == (TRITON_OP, None)
    assert module.__dict__["kernel_fn"] is module.kernel_fn  # the module is as it was
    assert all(type(v).__name__ != "WrapTritonJITFunction" for v in module.__dict__.values())


UNTRACEABLE_GELU = '''
import torch
import triton
import triton.language as tl

@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

def kernel_fn(x, approximate="none"):
    y = torch.empty_like(x)
    if x.abs().max().item() > 0:  # data-dependent host logic
        _kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
'''


def test_untraceable_host_code_stays_a_custom_op_and_says_why() -> None:
    module = jit_module("tt_untraceable", UNTRACEABLE_GELU)
    with jit_not_interpreted():
        path, why = choose_compile_path(module.kernel_fn, module, get_integration("gelu"), "cpu",
                                        None, torch.float32)
    assert path == CUSTOM_OP
    assert why is not None and why.startswith("host code does not trace")
    # Under the interpreter the automatic choice is the custom_op, and the report says why.
    e = entry("gelu", tag="01_gelu")
    [kernel] = build_kernels([e], {e["tag"]: starter_path("gelu").read_text()}, REFERENCES,
                             integrations([e]), DEVICE, "tt_auto")
    if DEVICE == "cpu":
        assert kernel.op.compile_path == CUSTOM_OP
        [line] = patch_model(nn.GELU(), [kernel]).report.lines()
        assert "opaque to torch.compile (custom_op: Triton interpreter" in line, line


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", TYPES)
def test_on_a_gpu_inductor_compiles_the_triton_ops_with_no_graph_break(kernel_type: str) -> None:
    import torch._dynamo

    [kernel] = [registered(kernel_type, None, "tt_gpu")]
    assert kernel.op.compile_path == TRITON_OP, kernel.op.opaque_reason
    args = tiny_args(kernel_type)

    def f(*a: Any) -> torch.Tensor:
        return kernel.op.op(*a) * 2.0 + 1.0  # an epilogue for Inductor to schedule after it

    torch._dynamo.reset()
    assert torch._dynamo.explain(f)(*args).graph_break_count == 0
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    torch.testing.assert_close(compiled(*args), f(*args), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_on_a_gpu_the_patched_compiled_model_equals_eager() -> None:
    kernels = [registered(t, None, "tt_gpu_model") for t in MODEL_TYPES]
    assert all(k.op.compile_path == TRITON_OP for k in kernels), [k.op.opaque_reason
                                                                  for k in kernels]
    kernels[2].params["approximate"] = "tanh"
    model = Block().to(DEVICE)
    x = torch.randn(4, 3, 16, device=DEVICE)
    with torch.no_grad():
        expected = model(x)
    patch_model(model, kernels, under_compile="transparent")
    compiled = torch.compile(model, backend="inductor", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), expected, atol=1e-4, rtol=1e-4)


def _filled(example: tuple[Any, ...]) -> tuple[Any, ...]:
    """An op entry's example arguments (empty tensors, for tracing) with values: floats from a
    seeded normal, integer tensors (class targets) left at their zeros."""
    generator = torch.Generator().manual_seed(11)
    return tuple(
        (torch.randn(a.shape, generator=generator) * 0.5).to(a.dtype).to("cuda")
        if isinstance(a, torch.Tensor) and a.is_floating_point()
        else a.to("cuda") if isinstance(a, torch.Tensor) else a
        for a in example)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", sorted(KERNEL_TYPES))
def test_on_a_gpu_every_kernel_type_compiles_under_inductor_as_a_triton_op(
        kernel_type: str) -> None:
    """Issue 25: each type's starter is a triton_op that Inductor compiles into a graph (no
    graph break, no compile error), with the eager call's outputs."""
    import torch._dynamo

    kernel = registered(kernel_type, None, "tt_every_type")
    assert kernel.op.compile_path == TRITON_OP, kernel.op.opaque_reason
    args = _filled(get_integration(kernel_type).example(torch.float16))
    with torch.no_grad():
        expected = kernel.op.op(*args)
        torch._dynamo.reset()
        compiled = torch.compile(lambda *a: kernel.op.op(*a), backend="inductor",
                                 fullgraph=True)
        torch.testing.assert_close(compiled(*args), expected, atol=2e-3, rtol=2e-3)
