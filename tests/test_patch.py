"""Routing a model to the kernels: every kernel type as a custom op, modules and functional calls,
fallbacks with reasons, probes, the Linear transpose cache, gradients and torch.compile.

The kernels are the starters (each a valid kernel.py), registered as a finished run's would be.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.loader import verified_params
from autokernel.integrate.patch import RoutedKernel, build_kernels, patch_model
from autokernel.kernels import starter_path
from autokernel.harness.outputs import as_outputs
from autokernel.ops import KERNEL_TYPES, get_integration, get_spec
from autokernel.ops.spec import dtype_name
from autokernel.reference import REFERENCES
from conftest import DEVICE

D, HEADS, HEAD_DIM, HIDDEN, VOCAB, BATCH, SEQ = 32, 2, 16, 48, 40, 2, 8


def entry(kernel_type: str, role: str = "", params: dict[str, Any] | None = None,
          sites: tuple[str, ...] = (), tag: str | None = None,
          shape: tuple[int, ...] = ()) -> dict[str, Any]:
    spec = get_spec(kernel_type)
    if params is None:
        params = {"eps": 1e-5} if "norm" in kernel_type else {}
    return {
        "tag": tag or f"01_{kernel_type}",
        "kernel_type": kernel_type,
        "role": role,
        "dtypes": [dtype_name(d) for d in spec.dtypes],
        # As the loader fills them in: the profiled eps, the reference's causal=True, scale=None.
        "params": verified_params(kernel_type, params),
        "sites": list(sites),
        "tolerances": {dtype_name(d): [t.atol, t.rtol] for d, t in spec.tolerances.items()},
        "limits": {},
        "shape": list(shape),
    }


def build(*entries: dict[str, Any]) -> list[RoutedKernel]:
    """The starters registered for these manifest entries (as a finished run's kernels are)."""
    sources = {e["tag"]: starter_path(e["kernel_type"]).read_text() for e in entries}
    return build_kernels(list(entries), sources, REFERENCES, integrations(entries), DEVICE,
                         "test_patch")


def integrations(entries: Any) -> dict[str, Any]:
    return {e["kernel_type"]: get_integration(e["kernel_type"]) for e in entries}


def counted(kernel: RoutedKernel) -> tuple[RoutedKernel, dict[str, int]]:
    """The kernel with its calls counted, through the custom op or directly."""
    calls = {"op": 0, "direct": 0}

    def through_op(*args: Any) -> torch.Tensor:
        calls["op"] += 1
        return kernel.op.op(*args)

    def direct(*args: Any) -> torch.Tensor:
        calls["direct"] += 1
        return kernel.op.direct(*args)

    op = dataclasses.replace(kernel.op, op=through_op, direct=direct)
    return dataclasses.replace(kernel, op=op), calls


@pytest.fixture(scope="module")
def kernels() -> dict[str, RoutedKernel]:
    entries = [entry(t) for t in KERNEL_TYPES]
    sources = {e["tag"]: starter_path(e["kernel_type"]).read_text() for e in entries}
    built = build_kernels(entries, sources, REFERENCES, integrations(entries), DEVICE,
                          "test_patch")
    return {k.kernel_type: k for k in built}


class HandRMSNorm(nn.Module):
    """As examples/models/llama.py writes it."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) \
            * self.weight


class GemmaRMSNorm(HandRMSNorm):
    """x · rsqrt(mean(x²) + eps) · (1 + weight): the same structure, not the same op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) / self.weight * (1 + self.weight)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, max_seq: int) -> None:
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_cached[: q.shape[-2]], self.sin_cached[: q.shape[-2]]
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int, activation: Any = F.silu) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)  # gate (Meta's names)
        self.w3 = nn.Linear(d, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, d, bias=False)  # down
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.activation(self.w1(x)) * self.w3(x))


class Everything(nn.Module):
    """One of each pattern the router knows, at interpreter-friendly sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.rms = nn.RMSNorm(D, eps=1e-5)
        self.hand_rms = HandRMSNorm(D)
        self.ln = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)  # with a bias
        self.rotary = Rotary(HEAD_DIM, 16)
        self.mlp = SwiGLU(D, HIDDEN)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # A product, not a sum: an add feeding the LayerNorm would be add_layernorm's call.
        h = self.ln(self.rms(x) * self.hand_rms(x))
        q, k, v = self.qkv(h).view(BATCH, SEQ, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, k)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + attention.transpose(1, 2).reshape(BATCH, SEQ, D)
        h = h + self.mlp(h)
        logits = self.head(h)
        probs = logits.softmax(-1) + torch.softmax(logits, dim=-1) + F.softmax(logits, dim=-1)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        return logits, probs.sum(-1), loss


# Calls per forward of Everything, per kernel type (the MLP's three Linears run inside fused_mlp).
EXPECTED_CALLS = {"rmsnorm": 2, "layernorm": 1, "matmul": 2, "rotary_embedding": 1,
                  "flash_attention": 1, "fused_mlp": 1, "softmax": 3, "reduce": 1,
                  "cross_entropy": 1,
                  "gelu": 0,  # this model calls no GELU; tests/test_gelu.py routes one
                  # No norm takes an add's result here; tests/test_add_rmsnorm.py and
                  # tests/test_add_layernorm.py fuse some.
                  "add_rmsnorm": 0, "add_layernorm": 0,
                  # The head is the matmul kernel's module route here, which never calls
                  # F.linear; tests/test_linear_cross_entropy.py routes a head + loss.
                  "linear_cross_entropy": 0}


def make_inputs(device: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(BATCH, SEQ, D, generator=generator).to(device=device, dtype=dtype)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator).to(device)
    targets[0, 0] = -100  # one ignored position
    return x, targets


def make_model(device: str, dtype: torch.dtype = torch.float32) -> Everything:
    torch.manual_seed(0)
    model = Everything().to(device=device, dtype=dtype).eval()
    with torch.no_grad():  # non-trivial affine parameters, so a dropped weight shows
        model.rms.weight.uniform_(0.5, 1.5)
        model.ln.weight.uniform_(0.5, 1.5)
        model.ln.bias.uniform_(-0.5, 0.5)
    return model


def assert_outputs_close(out: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...],
                         atol: float = 1e-4, rtol: float = 1e-4) -> None:
    assert len(out) == len(ref)
    for a, b in zip(out, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def test_every_kernel_type_is_routed_and_matches_the_original(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    model = make_model(device)
    inputs = make_inputs(device)
    with torch.no_grad():
        reference = model(*inputs)
    patch = patch_model(model, kernels.values())
    with torch.no_grad():
        routed = model(*inputs)
    assert_outputs_close(routed, reference)
    calls = {stats.kernel_type: stats.calls for stats in patch.report.kernels.values()}
    assert calls == EXPECTED_CALLS
    assert all(not s.fallbacks for s in patch.report.kernels.values())
    modules = {s.kernel_type: sorted(s.modules) for s in patch.report.kernels.values()}
    assert modules["rmsnorm"] == ["hand_rms", "rms"]
    assert modules["matmul"] == ["head", "qkv"]  # mlp.w1/w2/w3 belong to the fused_mlp route
    assert modules["fused_mlp"] == ["mlp"] and modules["rotary_embedding"] == ["rotary"]
    assert patch.report.kernels["01_softmax"].scopes == [""]  # no plan sites: the whole model


def test_unpatch_restores_every_forward_and_state_dict_never_changes(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    model = make_model(device)
    inputs = make_inputs(device)
    keys = list(model.state_dict())
    with torch.no_grad():
        reference = model(*inputs)
    patch = patch_model(model, kernels.values())
    assert list(model.state_dict()) == keys
    with pytest.raises(ValueError, match="already patched"):
        patch_model(model, kernels.values())
    patch.unpatch()
    assert not any("forward" in m.__dict__ for m in model.modules())
    with torch.no_grad():
        again = model(*inputs)
    for a, b in zip(again, reference):
        assert torch.equal(a, b)


class Unsupported(nn.Module):
    """Calls each kernel type's functional op in a way its kernel does not cover."""

    def __init__(self) -> None:
        super().__init__()
        self.gemma = GemmaRMSNorm(D)
        self.loose_ln = nn.LayerNorm(D, eps=1e-3)  # the kernel was verified with eps=1e-5
        self.gelu_mlp = SwiGLU(D, HIDDEN, activation=F.gelu)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.gelu_mlp(self.loose_ln(self.gemma(x)))
        q = h.view(BATCH, SEQ, HEADS, HEAD_DIM).transpose(1, 2)
        mask = torch.ones(SEQ, SEQ, dtype=torch.bool, device=x.device).tril()
        masked = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        bidirectional = F.scaled_dot_product_attention(q, q, q, is_causal=False)
        rescaled = F.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.5)
        columns = torch.softmax(h, dim=0)
        totals = h.sum(0)
        smoothed = F.cross_entropy(h.reshape(-1, D), targets.reshape(-1) % D,
                                   label_smoothing=0.1)
        return masked, bidirectional, rescaled, columns, totals, smoothed


def test_unsupported_calls_fall_back_with_reasons_and_probes_reject_lookalikes(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    torch.manual_seed(0)
    model = Unsupported().to(device).eval()
    inputs = make_inputs(device)
    with torch.no_grad():
        reference = model(*inputs)
    # gelu would take the gated MLP's F.gelu calls, which it computes (tests/test_gelu.py).
    but_matmul = [k for t, k in kernels.items() if t not in ("matmul", "gelu")]
    patch = patch_model(copy.deepcopy(model), but_matmul)
    with torch.no_grad():
        out = patch.model(*inputs)
    assert_outputs_close(out, reference, atol=0, rtol=0)  # all of it ran the original code
    stats = {s.kernel_type: s for s in patch.report.kernels.values()}
    assert patch.report.calls == 0
    assert stats["flash_attention"].fallbacks == {"attn_mask": 1,
                                                  "is_causal=False (verified: True)": 1,
                                                  "scale=0.5 (verified: 0.25)": 1}
    assert stats["layernorm"].fallbacks == {"eps=0.001 (verified: 1e-05)": 1}
    assert stats["softmax"].fallbacks == {
        "over dim 0 of 3; the kernel was verified over the last dim only": 1}
    assert stats["reduce"].fallbacks == {
        "over dim 0 of 3; the kernel was verified over the last dim only": 1}
    assert stats["cross_entropy"].fallbacks == {"weight, smoothing or legacy arguments": 1}
    assert stats["rmsnorm"].modules == [] and "probe" in stats["rmsnorm"].skipped["gemma"]
    assert stats["fused_mlp"].modules == [] and "probe" in stats["fused_mlp"].skipped["gelu_mlp"]
    # The rejected MLP keeps its forward, whose Linears are matmul's to take.
    with_matmul = patch_model(model, kernels.values())
    assert with_matmul.report.kernels["01_matmul"].modules == ["gelu_mlp.w1", "gelu_mlp.w3",
                                                               "gelu_mlp.w2"]


def test_a_dtype_the_harness_did_not_verify_runs_the_original(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    model = make_model(device, torch.float64)
    inputs = make_inputs(device, torch.float64)
    with torch.no_grad():
        reference = model(*inputs)
    patch = patch_model(model, kernels.values())
    with torch.no_grad():
        out = model(*inputs)
    assert_outputs_close(out, reference, atol=0, rtol=0)
    assert patch.report.calls == 0
    for stats in patch.report.kernels.values():
        assert set(stats.fallbacks) <= {"dtype float64 not verified"}, stats.fallbacks
    assert patch.report.kernels["01_rmsnorm"].fallbacks["dtype float64 not verified"] == 2


def test_linear_transposes_its_weight_once_and_again_only_when_it_changes(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(24, 8).to(device)
    model = nn.Sequential(linear)
    patch = patch_model(model, [kernels["matmul"]])
    route = linear.forward
    x = torch.randn(5, 24, device=device)
    with torch.no_grad():
        first = model(x)
        cached = route.cache["weight_t"]
        model(x)
        assert route.cache["weight_t"] is cached  # no copy per call
        torch.testing.assert_close(first, F.linear(x, linear.weight, linear.bias))
        linear.weight.mul_(2.0)  # an in-place update (an optimizer step) bumps the version
        second = model(x)
    assert route.cache["weight_t"] is not cached
    torch.testing.assert_close(second, F.linear(x, linear.weight, linear.bias))
    assert patch.report.kernels["01_matmul"].calls == 3


class Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def test_eager_inference_skips_the_op_dispatcher_and_autograd_goes_through_it(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    real = kernels["softmax"]
    calls = {"op": 0, "direct": 0}

    def through_op(*args: Any) -> torch.Tensor:
        calls["op"] += 1
        return real.op.op(*args)

    def direct(*args: Any) -> torch.Tensor:
        calls["direct"] += 1
        return real.op.direct(*args)

    counted = dataclasses.replace(real, op=dataclasses.replace(real.op, op=through_op,
                                                               direct=direct))
    model = Softmax()
    patch_model(model, [counted])
    x = torch.randn(3, 5, device=device)
    with torch.no_grad():
        model(x)
    model(x)  # grad mode, but nothing needs a gradient
    assert calls == {"op": 0, "direct": 2}
    model(x.requires_grad_(True)).sum().backward()
    assert calls == {"op": 1, "direct": 2}
    assert x.grad is not None


def test_gradients_flow_through_every_kernel_like_the_original(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    original = make_model(device)
    patched = copy.deepcopy(original)
    patch = patch_model(patched, kernels.values())
    x, targets = make_inputs(device)

    def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
        leaf = x.clone().requires_grad_(True)
        logits, pooled, loss = model(leaf, targets)
        (logits.square().mean() + pooled.mean() + loss).backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        grads["input"] = leaf.grad
        return grads

    expected, routed = gradients(original), gradients(patched)
    assert patch.report.calls == sum(EXPECTED_CALLS.values())
    assert set(routed) == set(expected)
    for name in expected:
        assert routed[name] is not None, f"no gradient reached {name}"
        torch.testing.assert_close(routed[name], expected[name], atol=1e-4, rtol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")


def _patched_and_traced(kernels: dict[str, RoutedKernel], device: str,
                        **options: str) -> tuple[nn.Module, tuple[Any, ...], Any, Any, set[str]]:
    """(model, inputs, unpatched output, patch, ops of Dynamo's graphs); asserts no break."""
    import torch._dynamo

    model = make_model(device)
    inputs = make_inputs(device)
    with torch.no_grad():
        reference = model(*inputs)
    patch = patch_model(model, kernels.values(), **options)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(*inputs)
    assert explained.graph_break_count == 0
    ops = {str(node.target) for graph in explained.graphs for node in graph.graph.nodes}
    return model, inputs, reference, patch, ops


def test_under_compile_the_kernels_step_aside_for_inductor_by_default(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    model, inputs, reference, patch, ops = _patched_and_traced(kernels, device)
    assert not any("autokernel." in op for op in ops), ops
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    patch.report.reset_counts()
    with torch.no_grad():
        assert_outputs_close(compiled(*inputs), reference)
        assert patch.report.calls == 0  # the compiled graph holds the original ops only
        model(*inputs)  # eager calls still go to the kernels
    assert patch.report.calls > 0
    with pytest.raises(ValueError,
                       match="under_compile must be one of inductor, transparent, kernels"):
        patch_model(make_model(device), kernels.values(), under_compile="cudagraphs")


def test_the_patched_model_compiles_to_one_graph_with_the_kernels_inside(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    model, inputs, reference, _, ops = _patched_and_traced(kernels, device,
                                                           under_compile="kernels")
    assert sum("autokernel." in op for op in ops) == sum(1 for n in EXPECTED_CALLS.values() if n)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert_outputs_close(compiled(*inputs), reference)


def _tiny_inputs(kernel_type: str, device: str) -> tuple[Any, ...]:
    generator = torch.Generator().manual_seed(3)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device).requires_grad_(True)

    return {
        "matmul": lambda: (r(5, 8), r(8, 6)),
        "flash_attention": lambda: (r(1, 2, 5, 16), r(1, 2, 5, 16), r(1, 2, 5, 16), True, None),
        "fused_mlp": lambda: (r(3, 8), r(12, 8), r(12, 8), r(8, 12)),
        "softmax": lambda: (r(3, 7),),
        "layernorm": lambda: (r(3, 7), r(7), r(7), 1e-5),
        "rmsnorm": lambda: (r(3, 7), r(7), 1e-5),
        "cross_entropy": lambda: (r(4, 7), torch.tensor([1, -100, 3, 0], device=device)),
        "rotary_embedding": lambda: (r(1, 2, 5, 8), r(5, 8), r(5, 8)),
        "reduce": lambda: (r(3, 40),),
        "gelu": lambda: (r(3, 7), "tanh"),
        "add_rmsnorm": lambda: (r(3, 7), r(3, 7), r(7), 1e-5),
        "add_layernorm": lambda: (r(3, 7), r(3, 7), r(7), r(7), 1e-5),
        "linear_cross_entropy": lambda: (r(4, 8), r(7, 8),
                                         torch.tensor([1, -100, 6, 0], device=device)),
    }[kernel_type]()


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_custom_op_registration_fake_and_backward(
        kernels: dict[str, RoutedKernel], kernel_type: str, device: str) -> None:
    """opcheck: schema, fake (meta) implementation, autograd registration, AOT dispatch; then the
    backward (analytic or reference recompute) against the reference's own autograd."""
    kernel = kernels[kernel_type]
    args = _tiny_inputs(kernel_type, device)
    torch.library.opcheck(kernel.op.op, args, test_utils=(
        "test_schema", "test_autograd_registration", "test_faketensor",
        "test_aot_dispatch_dynamic"))
    out, ref = as_outputs(kernel.op.op(*args)), as_outputs(get_spec(kernel_type).reference(*args))
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    generator = torch.Generator().manual_seed(5)
    directions = [torch.randn(o.shape, generator=generator).to(o) for o in out]
    routed = torch.autograd.grad(out, leaves, directions)
    expected = torch.autograd.grad(ref, leaves, directions)
    for a, b in zip(routed, expected):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_probe_tells_gate_from_up_even_when_outputs_are_tiny(
        kernels: dict[str, RoutedKernel], device: str) -> None:
    """Half-precision MLP outputs of a fresh model are ~1e-2, inside an absolute tolerance: the
    probe must still route gate and up the right way round (its error is relative)."""

    class UpFirst(SwiGLU):  # children in the order up, gate, down: the first guess is wrong
        def __init__(self) -> None:
            nn.Module.__init__(self)
            self.w3 = nn.Linear(D, HIDDEN, bias=False)
            self.w1 = nn.Linear(D, HIDDEN, bias=False)
            self.w2 = nn.Linear(HIDDEN, D, bias=False)
            self.activation = F.silu

    torch.manual_seed(0)
    dtype = torch.float16
    mlp = UpFirst().to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for linear in (mlp.w1, mlp.w2, mlp.w3):
            linear.weight.mul_(0.05)
    x = torch.randn(4, D, device=device, dtype=dtype)
    with torch.no_grad():
        expected = mlp(x)
    assert expected.abs().max() < 1e-2
    patch = patch_model(mlp, [kernels["fused_mlp"]])
    assert mlp.forward.details["projections"] == ("w1", "w3", "w2")
    with torch.no_grad():
        routed = mlp(x)
    assert patch.report.calls == 1
    error = (routed.double() - expected.double()).norm() / expected.double().norm()
    assert error < 1e-2


# ---------------------------------------------------------------------------------------------
# Matmul by role: nn.Linear only to the "linear" kernel, torch.matmul & co. to "batched"/"gemm"


class Projections(nn.Module):
    """A linear layer, then attention-like products: batched q @ kᵀ and p @ v, a bmm, x @ W."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)
        self.weight = nn.Parameter(torch.randn(HEAD_DIM, 6) * 0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x).view(BATCH, SEQ, HEADS, HEAD_DIM).transpose(1, 2)
        scores = h @ h.transpose(-2, -1)  # [B, H, S, S], B a transposed view
        mixed = torch.matmul(scores.softmax(-1), h)  # [B, H, S, D]
        folded = torch.bmm(mixed.reshape(-1, SEQ, HEAD_DIM), h.reshape(-1, SEQ, HEAD_DIM)
                           .transpose(1, 2))
        gemm = mixed @ self.weight  # a 2-D second operand: role "gemm"
        return scores, mixed, folded, gemm


class InSite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Projections()
        self.outside = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *products, gemm = self.attn(x)
        return self.outside(gemm), *products, gemm.mT @ gemm  # the last product: no site


def test_nn_linear_goes_only_to_the_linear_role_kernel(device: str) -> None:
    batched, linear = build(entry("matmul", role="batched", tag="01_matmul", sites=("attn",)),
                            entry("matmul", role="linear", tag="02_matmul"))
    torch.manual_seed(0)
    model = InSite().to(device).eval()
    x = torch.randn(BATCH, SEQ, D, device=device)
    with torch.no_grad():
        expected = model(x)
    patch = patch_model(model, [batched, linear])  # the batched kernel first: it must not win
    with torch.no_grad():
        routed = model(x)
    assert_outputs_close(routed, expected)
    stats = patch.report.kernels
    assert sorted(stats["02_matmul"].modules) == ["attn.proj", "outside"]
    assert stats["01_matmul"].modules == [] and stats["01_matmul"].scopes == ["attn"]
    # q @ kᵀ, p @ v and the bmm inside attn; x @ W there is a gemm, the last product is outside.
    assert stats["01_matmul"].calls == 3 and not stats["01_matmul"].fallbacks
    assert stats["02_matmul"].calls == 2
    patch.unpatch()

    alone = patch_model(model, [batched])  # a batched kernel alone never takes a Linear
    assert "forward" not in model.attn.proj.__dict__ and alone.report.kernels[
        "01_matmul"].modules == []
    alone.unpatch()


BATCHED_SHAPES = [((3, 5, 7), (3, 7, 4)), ((2, 3, 5, 7), (3, 7, 4)), ((2, 1, 5, 9), (2, 3, 9, 6))]
BATCHED_CASES = [(spelling, a, b) for spelling in ("@", "torch.matmul", "Tensor.matmul",
                                                   "torch.bmm", "Tensor.bmm")
                 for a, b in BATCHED_SHAPES if "bmm" not in spelling or len(a) == len(b) == 3]


@pytest.mark.parametrize("spelling, a_shape, b_shape", BATCHED_CASES)
def test_batched_matmul_routes_every_spelling_with_gradients(
        spelling: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...], device: str) -> None:
    call = {"@": lambda a, b: a @ b, "torch.matmul": torch.matmul,
            "Tensor.matmul": lambda a, b: a.matmul(b), "torch.bmm": torch.bmm,
            "Tensor.bmm": lambda a, b: a.bmm(b)}[spelling]

    class Product(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return call(a, b)

    (kernel,) = build(entry("matmul", role="batched", tag="01_matmul"))
    kernel, calls = counted(kernel)
    generator = torch.Generator().manual_seed(2)
    a, b = (torch.randn(s, generator=generator).to(device) for s in (a_shape, b_shape))
    model = Product()
    expected = call(a, b)
    patch = patch_model(model, [kernel])
    with torch.no_grad():
        torch.testing.assert_close(model(a, b), expected, atol=1e-5, rtol=1e-5)
    assert calls == {"op": 0, "direct": 1}
    leaves = [a.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    direction = torch.randn(expected.shape, generator=generator).to(device)
    routed = torch.autograd.grad(model(*leaves), leaves, direction)
    reference = torch.autograd.grad(call(*leaves), leaves, direction)
    assert calls["op"] == 1 and patch.report.kernels["01_matmul"].calls == 2
    for got, want in zip(routed, reference):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_gemm_role_takes_x_at_w_and_addmm_but_not_batched_products(device: str) -> None:
    class Conv1D(nn.Module):  # HF GPT-2's projection: addmm(bias, x, W)
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(D, 12) * 0.2)
            self.bias = nn.Parameter(torch.randn(12))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            flat = torch.addmm(self.bias, x.reshape(-1, D), self.weight)
            folded = x @ self.weight  # [B, S, D] @ [D, 12]
            batched = x @ x.transpose(-2, -1)  # not a gemm
            return flat, folded, batched

    (kernel,) = build(entry("matmul", role="gemm", tag="01_matmul"))
    torch.manual_seed(0)
    model = Conv1D().to(device)
    x = torch.randn(BATCH, SEQ, D, device=device)
    with torch.no_grad():
        expected = model(x)
        patch = patch_model(model, [kernel])
        routed = model(x)
    assert_outputs_close(routed, expected)
    stats = patch.report.kernels["01_matmul"]
    assert stats.calls == 2 and not stats.fallbacks and stats.modules == []


def test_matmul_custom_op_is_batched_like_torch_matmul(device: str) -> None:
    """opcheck of the fake (broadcast batch dims) and the backward (summed back to each
    operand's shape) for the shapes the batched route hands over."""
    (kernel,) = build(entry("matmul", role="batched", tag="01_matmul"))
    generator = torch.Generator().manual_seed(4)
    for a_shape, b_shape in (((2, 3, 5, 7), (3, 7, 4)), ((4, 5, 7), (7, 6)), ((5, 7), (2, 7, 3))):
        a, b = (torch.randn(s, generator=generator).to(device).requires_grad_(True)
                for s in (a_shape, b_shape))
        torch.library.opcheck(kernel.op.op, (a, b), test_utils=(
            "test_schema", "test_autograd_registration", "test_faketensor",
            "test_aot_dispatch_dynamic"))


# ---------------------------------------------------------------------------------------------
# Explicit attention, softmax(q @ kᵀ · scale [causal mask]) @ v → flash_attention


class VitAttention(nn.Module):
    """As examples/models/vit_encoder.py writes it: no mask, a scale multiplied in."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        return scores.softmax(dim=-1) @ v


class CausalAttention(nn.Module):
    """minGPT-like with a registered boolean mask, divided by √d, dropout in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1))
        self.dropout = nn.Dropout(0.1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores.masked_fill_(self.mask, float("-inf"))
        return self.dropout(torch.softmax(scores, dim=-1)) @ v


class HFEagerAttention(nn.Module):
    """HF GPT-2's eager attention: / full([], √d), where(tril, s, min), softmax in float."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(16, 16, dtype=torch.bool))[None, None])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / torch.full([], v.size(-1) ** 0.5, dtype=scores.dtype)
        floor = torch.full([], torch.finfo(scores.dtype).min, dtype=scores.dtype)
        scores = torch.where(self.bias[:, :, :SEQ, :SEQ], scores, floor)
        probs = F.softmax(scores.float(), dim=-1).type_as(v)
        return torch.matmul(probs, v)


class Holder(nn.Module):
    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attn = attention

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attn(q, k, v) * 2.0


def attention_inputs(device: str, grad: bool = False) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=generator).to(device)
            .requires_grad_(grad) for _ in range(3)]


@pytest.mark.parametrize("attention, causal", [(VitAttention, False), (CausalAttention, True),
                                               (HFEagerAttention, True)],
                         ids=["vit", "masked_fill", "hf_where"])
def test_explicit_attention_goes_to_flash_attention(attention: type[nn.Module], causal: bool,
                                                    device: str) -> None:
    flash, softmax, batched = build(
        entry("flash_attention", params={"causal": causal, "scale": HEAD_DIM ** -0.5},
              sites=("attn",)),
        entry("softmax", sites=("attn",)),
        entry("matmul", role="batched", tag="01_matmul", sites=("attn",)))
    flash, calls = counted(flash)
    model = Holder(attention()).to(device).eval()
    q, k, v = attention_inputs(device)
    with torch.no_grad():
        expected = model(q, k, v)
    patch = patch_model(model, [flash, softmax, batched])
    with torch.no_grad():
        routed = model(q, k, v)
    torch.testing.assert_close(routed, expected, atol=1e-5, rtol=1e-5)
    assert calls == {"op": 0, "direct": 1}
    stats = {s.kernel_type: s for s in patch.report.kernels.values()}
    assert stats["flash_attention"].calls == 1 and not stats["flash_attention"].fallbacks
    assert stats["softmax"].calls == 0 and stats["matmul"].calls == 0  # the chain took them

    leaves = attention_inputs(device, grad=True)  # gradients through the kernel's backward
    patch.unpatch()
    expected_grads = torch.autograd.grad(model(*leaves).sum(), leaves)
    patch = patch_model(model, [flash])
    routed_grads = torch.autograd.grad(model(*leaves).sum(), leaves)
    assert calls["op"] == 1
    for got, want in zip(routed_grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


class AdditiveMask(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        bias = torch.linspace(-1, 0, SEQ, device=q.device)
        return (scores + bias).softmax(-1) @ v


class SlidingWindow(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        ones = torch.ones(SEQ, SEQ, dtype=torch.bool, device=q.device)
        window = ones.triu(1) | ones.tril(-3)  # not the causal triangle
        return scores.masked_fill(window, float("-inf")).softmax(-1) @ v


class ReturnsWeights(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1)
        return probs, probs.sum(-1)


@pytest.mark.parametrize("attention, reason", [
    (AdditiveMask, "attention chain: scores used by add"),
    (SlidingWindow, "attention chain: scores used by masked_fill"),
    (ReturnsWeights, "attention chain: scores used by sum"),
], ids=["additive_mask", "sliding_window", "returns_weights"])
def test_attention_the_kernel_does_not_compute_runs_as_written(
        attention: type[nn.Module], reason: str, device: str) -> None:
    (flash,) = build(entry("flash_attention", params={"causal": False, "scale": None},
                           sites=("",)))
    model = attention().to(device)
    inputs = attention_inputs(device)
    with torch.no_grad():
        expected = model(*inputs)
        patch = patch_model(model, [flash])
        out = model(*inputs)
    for got, want in zip(out if isinstance(out, tuple) else (out,),
                         expected if isinstance(expected, tuple) else (expected,)):
        assert isinstance(got, torch.Tensor) and torch.equal(got, want)  # the same calls
    stats = patch.report.kernels["01_flash_attention"]
    assert stats.calls == 0 and stats.fallbacks == {reason: 1}


class ComparedMask(nn.Module):
    """KernelBench L3 43 (minGPT): the mask is `bias[:, :, :T, :T] == 0`, a new tensor each
    forward, so its values are read on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(2 * SEQ, 2 * SEQ))[None, None])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(self.bias[:, :, :seq, :seq] == 0, float("-inf"))
        return F.softmax(scores, dim=-1) @ v


class WhereFromTable(nn.Module):
    """The same table kept as a boolean `where` condition: `bias[..].bool()` keeps the lower
    triangle (HF's form, made from a 0/1 table)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("bias", table[None, None])

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        keep = self.bias[:, :, :seq, :seq].bool()
        scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ v


@pytest.mark.parametrize("make", [ComparedMask, lambda: WhereFromTable(
    torch.tril(torch.ones(2 * SEQ, 2 * SEQ)))], ids=["eq_0", "bool_where"])
def test_a_mask_made_from_a_table_is_read_once_per_table_not_per_forward(
        make: Any, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """minGPT's `bias[:, :, :T, :T] == 0` is a new tensor each forward. Its kind comes from the
    table's, read on the first forward only: later forwards read nothing (here: reading is
    refused, as while a CUDA graph is captured, and the chain is still routed)."""
    from autokernel.integrate import attention_chain

    (flash,) = build(entry("flash_attention", params={"causal": True, "scale": None},
                           sites=("",)))
    model = make().to(device).eval()
    inputs = attention_inputs(device)
    with torch.no_grad():
        expected = model(*inputs)
        patch = patch_model(model, [flash])
        torch.testing.assert_close(model(*inputs), expected, atol=1e-5, rtol=1e-5)
        monkeypatch.setattr(attention_chain, "_capturing", lambda tensor: True)
        torch.testing.assert_close(model(*inputs), expected, atol=1e-5, rtol=1e-5)
    stats = patch.report.kernels["01_flash_attention"]
    assert stats.calls == 2 and not stats.fallbacks


@pytest.mark.parametrize("table, reason", [
    (torch.ones(2 * SEQ, 2 * SEQ).triu(-2).tril(), "attention chain: scores used by masked_fill"),
    (torch.tril(torch.full((2 * SEQ, 2 * SEQ), 2.0)), "attention chain: scores used by masked_fill"),
], ids=["banded", "not_0_1"])
def test_a_mask_from_a_table_that_is_no_triangle_runs_as_written(
        table: torch.Tensor, reason: str, device: str) -> None:
    (flash,) = build(entry("flash_attention", params={"causal": True, "scale": None},
                           sites=("",)))
    model = ComparedMask().to(device).eval()
    model.bias = table[None, None].to(device)
    inputs = attention_inputs(device)
    with torch.no_grad():
        expected = model(*inputs)
        patch = patch_model(model, [flash])
        assert torch.equal(model(*inputs), expected)
    stats = patch.report.kernels["01_flash_attention"]
    assert stats.calls == 0 and stats.fallbacks == {reason: 1}


def test_a_mask_not_seen_before_is_not_read_while_a_cuda_graph_is_captured(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a mask's values synchronizes, which a CUDA graph capture cannot survive (on an
    H200 the capture failed and the next model built on the device raised from its random
    init). While capturing, a mask whose table was never read leaves the chain to PyTorch."""
    from autokernel.integrate import attention_chain

    (flash,) = build(entry("flash_attention", params={"causal": True, "scale": None},
                           sites=("",)))
    model = ComparedMask().to(device).eval()
    inputs = attention_inputs(device)
    with torch.no_grad():
        expected = model(*inputs)
        patch = patch_model(model, [flash])
        monkeypatch.setattr(attention_chain, "_capturing", lambda tensor: True)
        assert torch.equal(model(*inputs), expected)  # the calls as written
    stats = patch.report.kernels["01_flash_attention"]
    assert stats.calls == 0
    assert stats.fallbacks == {"attention chain: scores used by masked_fill": 1}


@pytest.mark.gpu
def test_on_a_gpu_a_chain_with_a_compared_mask_captures_in_a_cuda_graph() -> None:
    """The delivered cuda-graph mode on KernelBench L3 43's attention: the capture succeeds
    (the chain left to PyTorch inside it), the replay matches, and the device's random
    generator still works after it (a model can be built there)."""
    from autokernel.integrate.delivery import GraphedForward

    (flash,) = build(entry("flash_attention", params={"causal": True, "scale": None},
                           sites=("",)))
    model = ComparedMask().cuda().eval()
    inputs = [t.half() for t in attention_inputs("cuda")]
    model.half()
    with torch.no_grad():
        expected = model(*inputs)
        patch_model(model, [flash])
        graphed = GraphedForward(model)
        first, second = graphed(*inputs), graphed(*inputs)
    assert graphed._graphs and all(g is not None for g in graphed._graphs.values())
    torch.testing.assert_close(first, expected, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(second, expected, atol=2e-3, rtol=2e-3)
    torch.manual_seed(0)
    nn.Linear(8, 8, device="cuda")  # raised after a failed capture before settle_failed_capture


@pytest.mark.gpu
def test_on_a_gpu_a_failed_capture_leaves_the_random_generator_usable() -> None:
    from autokernel.integrate.delivery import settle_failed_capture

    x = torch.ones(4, device="cuda")
    with pytest.raises(Exception):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            (x * 2).sum().item()  # a host read: the capture fails
    settle_failed_capture()
    torch.manual_seed(0)
    layer = nn.Linear(8, 8, device="cuda")
    assert torch.isfinite(layer.weight).all()


# ---------------------------------------------------------------------------------------------
# A model's own RoPE function → rotary_embedding


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """As examples/models/mistral_decoder.py writes it: rotate-half with torch.cat((-x2, x1))."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids: Any = None,
                         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's: cos/sin [B, S, D] unsqueezed to broadcast over heads."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J's layout, pairs (x0, x1), (x2, x3)...: another rotation than the kernel's."""
    pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * cos + torch.cat((pairs[..., :0], pairs), dim=-1) * sin


def rope_tables(seq: int, dim: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.outer(torch.arange(seq).float(), 0.9 ** torch.arange(dim // 2).float())
    angles = torch.cat((angles, angles), dim=-1).to(device)
    return angles.cos(), angles.sin()


class RopeAttention(nn.Module):
    """q and k rotated by a plain function; cos/sin [max_seq, D] passed in and sliced. The
    subclasses rotate them in each of the ways models do."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(D, D)

    def project(self, x: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q = self.q(x).view(BATCH, SEQ, HEADS, HEAD_DIM).transpose(1, 2)
        return q, q.flip(-2) * 0.5, cos[:SEQ], sin[:SEQ]


class FunctionRope(RopeAttention):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, cos, sin = self.project(x, cos, sin)
        return rope(q, cos, sin) + rope(k, cos, sin)


class HFRope(RopeAttention):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, cos, sin = self.project(x, cos, sin)
        q, k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
        return q + k


class MethodRope(RopeAttention):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, cos, sin = self.project(x, cos, sin)
        return self.rotate(q, cos, sin) + self.rotate(k, cos, sin)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + rotate_half(x) * sin


class InlineRope(RopeAttention):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, cos, sin = self.project(x, cos, sin)
        return q * cos + rotate_half(q) * sin + k * cos + rotate_half(k) * sin


class InterleavedRope(RopeAttention):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, cos, sin = self.project(x, cos, sin)
        return rope_interleaved(q, cos, sin) + rope_interleaved(k, cos, sin)


ROPE_STYLES = {"function": FunctionRope, "hf": HFRope, "method": MethodRope,
               "inline": InlineRope, "interleaved": InterleavedRope}


class RopeModel(nn.Module):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.attn = ROPE_STYLES[style]()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return self.attn(x, cos, sin)


def rope_case(style: str, device: str) -> tuple[RopeModel, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = RopeModel(style).to(device).eval()
    x = torch.randn(BATCH, SEQ, D, device=device)
    return model, (x, *rope_tables(2 * SEQ, HEAD_DIM, device))


@pytest.mark.parametrize("style, function, launches", [
    ("function", "rope", 2), ("hf", "apply_rotary_pos_emb", 2), ("method", "rotate", 2)])
def test_a_rope_function_goes_to_the_kernel_at_its_call_site(style: str, function: str,
                                                             launches: int, device: str) -> None:
    (kernel,) = build(entry("rotary_embedding", sites=("attn",),
                            shape=(BATCH, HEADS, SEQ, HEAD_DIM)))
    kernel, calls = counted(kernel)
    model, inputs = rope_case(style, device)
    original = globals()[function] if style != "method" else None
    with torch.no_grad():
        expected = model(*inputs)
    patch = patch_model(model, [kernel])
    try:
        with torch.no_grad():
            routed = model(*inputs)
            torch.testing.assert_close(routed, expected, atol=1e-6, rtol=1e-6)
            assert calls == {"op": 0, "direct": launches}
            stats = patch.report.kernels["01_rotary_embedding"]
            assert stats.functions == [f"{function}() in attn"] and not stats.fallbacks
            assert stats.calls == (1 if style == "hf" else 2)
            if style == "function":  # outside the model's forward: the function itself
                torch.testing.assert_close(rope(inputs[0].view(BATCH, SEQ, HEADS, HEAD_DIM),
                                                inputs[1][:HEADS], inputs[2][:HEADS]),
                                           original(inputs[0].view(BATCH, SEQ, HEADS, HEAD_DIM),
                                                    inputs[1][:HEADS], inputs[2][:HEADS]))
                assert calls["direct"] == launches
        leaf = inputs[0].clone().requires_grad_(True)  # gradients through the kernel's backward
        model(leaf, *inputs[1:]).square().sum().backward()
        assert calls["op"] == launches
        routed_grads = [leaf.grad, *(p.grad for p in model.parameters())]
    finally:
        patch.unpatch()
    if original is not None:
        assert globals()[function] is original  # the name is the function again
    assert "rotate" not in model.attn.__dict__
    leaf = inputs[0].clone().requires_grad_(True)
    model.zero_grad()
    model(leaf, *inputs[1:]).square().sum().backward()
    for got, want in zip(routed_grads, [leaf.grad, *(p.grad for p in model.parameters())]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("style, reason", [
    ("inline", "no function rope(x, cos, sin) or (q, k, cos, sin) called by InlineRope"),
    ("interleaved", "probe: rope_interleaved() does not compute"),
])
def test_rope_that_is_no_such_function_is_left_alone_with_a_reason(style: str, reason: str,
                                                                   device: str) -> None:
    (kernel,) = build(entry("rotary_embedding", sites=("attn",)))
    model, inputs = rope_case(style, device)
    with torch.no_grad():
        expected = model(*inputs)
        patch = patch_model(model, [kernel])
        assert torch.equal(model(*inputs), expected)
    stats = patch.report.kernels["01_rotary_embedding"]
    assert stats.calls == 0 and stats.functions == []
    assert stats.skipped["attn"].startswith(reason)
    patch.unpatch()


def test_a_rope_call_with_tables_of_another_layout_runs_the_function(device: str) -> None:
    """rope(x [B, S, H, D], cos [S, 1, D]) is the same formula, broadcast another way: not the
    kernel's layout, so the call stays with the function and says why."""

    class SeqMajor(nn.Module):
        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            return rope(x, cos[:, None], sin[:, None])

    (kernel,) = build(entry("rotary_embedding", sites=("",)))
    x = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, device=device)
    cos, sin = rope_tables(SEQ, HEAD_DIM, device)
    model = SeqMajor()
    expected = model(x, cos, sin)
    patch = patch_model(model, [kernel])
    try:
        assert torch.equal(model(x, cos, sin), expected)
    finally:
        patch.unpatch()
    assert patch.report.kernels["01_rotary_embedding"].fallbacks == {
        f"cos/sin of shape {[SEQ, 1, HEAD_DIM]}": 1}


def test_rope_function_and_attention_chain_compile_without_graph_breaks(device: str) -> None:
    import torch._dynamo

    (kernel,) = build(entry("rotary_embedding", sites=("attn",)))
    model, inputs = rope_case("function", device)
    with torch.no_grad():
        expected = model(*inputs)
    patch = patch_model(model, [kernel], under_compile="kernels")
    try:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(*inputs)
        assert explained.graph_break_count == 0
        ops = {str(node.target) for graph in explained.graphs for node in graph.graph.nodes}
        assert any("autokernel.rotary_embedding" in op for op in ops)
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), expected, atol=1e-6, rtol=1e-6)
    finally:
        patch.unpatch()
