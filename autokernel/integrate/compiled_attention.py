"""Explicit attention compiled into the graph as the routed flash_attention op.

In eager mode `attention_chain.py` sends softmax(q @ kᵀ · scale) @ v, written out in torch calls,
to the flash_attention kernel. Under torch.compile that chain steps aside (its stand-in is no
tensor Dynamo can trace), so without this pass Inductor compiles the chain itself: on an H200 the
example ViT then took 1.05 ms of device time against 906.9 µs for the eager forward with the
kernel. `AttentionChainPass` puts the kernel back: it rewrites the graph Dynamo captured, before
AOTAutograd, replacing each chain it can prove equal to the kernel with one call of the kernel's
registered op.

Why a pre-grad pass (Inductor's `pre_grad_custom_pass`), and our own node walk:

- the replacement is a call of the registered op at the torch level, exactly what a routed call
  puts into a compiled graph: AOTAutograd then traces it like any other, so a triton_op's
  launches become kernels Inductor schedules (compile-transparent) and a custom_op's backward
  applies when the forward needs gradients. After AOTAutograd (a post-grad or joint-graph pass)
  a triton_op could no longer be opened into its launches and the backward is already traced;
- after AOTAutograd the chain is also decomposed: softmax into amax/sub/exp/sum/div, each 4-D
  matmul into expand/view/bmm with `clone`s that depend on the operands' layout (the q/k/v
  views of one fused qkv projection differ from contiguous ones). Inductor's own
  `fuse_attention.py` matches those forms with traced patterns (`_sfdp_pattern_*`), one set per
  spelling and per training/inference; with grad enabled and q/k/v views of one qkv projection
  it did not fire here (torch 2.13, CPU), and on the H200 (torch 2.11, fp16) it left the ViT's
  chain as written even under no_grad;
- the Dynamo graph is small and regular instead: torch functions, operators and tensor methods,
  every node with its example value (shape, dtype, device) in `node.meta["example_value"]`. A
  walk back from each `@ v` over the spellings `attention_chain.py` follows in eager mode is
  short, and says exactly why a chain is not taken.

What is replaced: `probs @ v` where probs is, back to front, any of float casts (`.float()`,
`.half()`, `.bfloat16()`, `.to(dtype)`, `.type_as(t)`) and dropout that does nothing (p = 0 or
training False), then a softmax over the last dim (`x.softmax(-1)`, `torch.softmax`,
`F.softmax`, with or without a float `dtype`), then casts again, then products with and
divisions by positive constants (`* s`, `s *`, `/ s`, `mul`, `div`), then `q @ k.transpose(-2, -1)`
(`@`, `torch.matmul`, `.matmul`; `.transpose`, `torch.transpose`, `.permute(0, 1, 3, 2)`).
Every node between the scores and `@ v` must feed the next one only (a model that also returns
the weights keeps its chain); q, k and v must have one static shape [B, H, S, D] and one dtype
the kernel was verified in, on its device, and the probabilities must come back in that dtype.
The kernel is one of the pass's flash_attention kernels whose params match the chain: causal
False and the scale the code writes (`route_helpers.attention_scale_unverified`, as in eager).

What is not: a chain with a mask (causal or not: a registered `tril` buffer reaches the graph as
an input whose values can change between calls, so it cannot be proved causal when compiling;
those chains are left to Inductor), an additive bias, a scale that is a tensor or a symbolic
value (dynamic shapes), softmax over another dim, active dropout, broadcast k/v heads or cross-
attention to another length. Those compile as written.

Installed per compile by `delivery.compile_with_kernels` (torch.compile's `options`), never
globally. This file imports only torch (and the integrate modules before it), because
`autokernel export` inlines it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from autokernel.integrate.routing import RoutedKernel
from autokernel.integrate.route_helpers import attention_scale_unverified

try:  # Inductor caches what a pass with a uuid() produced; a plain callable bypasses the cache
    from torch._inductor.custom_graph_pass import CustomGraphPass as _GraphPassBase
except ImportError:  # an older torch: any callable is a pass
    _GraphPassBase = object  # type: ignore[assignment, misc]

ATTENTION_PASS_VERSION = "1"  # part of the pass's uuid: bump when what is matched changes

# Python's operators (`a @ b`, `a * s`, `a / s`) are Dynamo nodes calling operator.matmul & co.:
# named by (module, name), since the exported module imports nothing but torch and a few others.
GRAPH_MATMULS = (("_operator", "matmul"), torch.matmul, "matmul")
GRAPH_MULTIPLIES = (("_operator", "mul"), torch.mul, "mul")
GRAPH_DIVIDES = (("_operator", "truediv"), torch.div, torch.true_divide, "div", "true_divide")
GRAPH_SOFTMAXES = (torch.softmax, F.softmax, "softmax")
GRAPH_FIXED_CASTS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
               "double": torch.float64}
GRAPH_DROPOUTS = (F.dropout, torch.dropout)


def _node_calls(node: Any, spellings: tuple[Any, ...]) -> bool:
    """Is `node` a call of one of these torch functions (callables), Python operators ((module,
    name) pairs) or tensor methods (names)?"""
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op == "call_function":
        named = (getattr(node.target, "__module__", None), getattr(node.target, "__name__", None))
        return any(node.target is s or named == s for s in spellings if not isinstance(s, str))
    return node.op == "call_method" and node.target in spellings


def _example_value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _static_shape_of(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, torch.Tensor):
        return None
    shape = tuple(value.shape)
    return shape if all(type(d) is int for d in shape) else None


def _positive_constant_of(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value > 0 else None


def _node_argument(node: torch.fx.Node, position: int, name: str, default: Any = None) -> Any:
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name, default)


@dataclass
class _MatchedAttention:
    """One matched softmax(q @ kᵀ · scale) @ v: its nodes front to back, and what it computes."""

    q: torch.fx.Node
    k: torch.fx.Node
    v: torch.fx.Node
    scale: float  # 1.0 when the code writes none
    nodes: list[torch.fx.Node]  # the scores' matmul ... the output's matmul


class AttentionChainPass(_GraphPassBase):  # type: ignore[misc, valid-type]
    """An Inductor pre-grad pass: explicit attention → the flash_attention kernel's op.

    `kernels`: the flash_attention kernels routed into compiled graphs for this compile (others
    are ignored). `replaced` counts the chains replaced so far, over every graph this pass ran
    on; `left` the chains found and left to Inductor, with the reason. A graph Inductor finds
    in its cache (keyed with `uuid()`) is not passed again, and not counted."""

    def __init__(self, kernels: Iterable[RoutedKernel]) -> None:
        self.kernels = [k for k in kernels if k.kernel_type == "flash_attention"]
        self.replaced = 0
        self.left: dict[str, int] = {}

    def __call__(self, graph: torch.fx.Graph) -> None:
        if not self.kernels:
            return
        for node in list(graph.nodes):
            if node.graph is graph and _node_calls(node, GRAPH_MATMULS) and len(node.args) == 2 \
                    and not node.kwargs:
                self._replace(graph, node)

    def uuid(self) -> bytes:
        """Inductor's cache key for this pass: what it matches and which ops it inserts."""
        text = "\0".join([ATTENTION_PASS_VERSION] + sorted(
            f"{k.op.qualname}|{sorted(k.params.items())}|{sorted(map(str, k.dtypes))}"
            for k in self.kernels))
        return hashlib.sha256(text.encode()).digest()

    # -------------------------------------------------------------------------------------------

    def _leave(self, reason: str) -> None:
        self.left[reason] = self.left.get(reason, 0) + 1

    def _replace(self, graph: torch.fx.Graph, output: torch.fx.Node) -> None:
        chain = _match_attention(output)
        if chain is None:
            return
        q_value, k_value, v_value = (_example_value(n) for n in (chain.q, chain.k, chain.v))
        shape = _static_shape_of(q_value)
        if shape is None or len(shape) != 4 or _static_shape_of(k_value) != shape or \
                _static_shape_of(v_value) != shape:
            return self._leave("q, k, v not of one static shape [B, H, S, D]")
        probs_value = _example_value(output.args[0])
        if not (q_value.dtype == k_value.dtype == v_value.dtype) or \
                not isinstance(probs_value, torch.Tensor) or probs_value.dtype != q_value.dtype:
            return self._leave("dtype changes along the chain")
        kernel, why = self._kernel_for(q_value, v_value, chain.scale, shape[-1])
        if kernel is None:
            return self._leave(why)
        default = shape[-1] ** -0.5
        scale = None if math.isclose(chain.scale, default, rel_tol=1e-6) else chain.scale
        with graph.inserting_before(output):
            call = graph.call_function(kernel.op.op, (chain.q, chain.k, chain.v, False, scale))
        call.meta.update(output.meta)  # the same [B, H, S, D] output: its example value holds
        output.replace_all_uses_with(call)
        for node in reversed(chain.nodes):  # back to front: each has no user left when erased
            graph.erase_node(node)
        transpose = chain.nodes[0].args[1]
        if isinstance(transpose, torch.fx.Node) and not transpose.users:
            graph.erase_node(transpose)
        self.replaced += 1

    def _kernel_for(self, q: torch.Tensor, v: torch.Tensor, scale: float,
                    head_dim: int) -> tuple[RoutedKernel | None, str]:
        """The first kernel verified for this chain, or None and why none is."""
        why = "no flash_attention kernel"
        for kernel in self.kernels:
            if q.dtype not in kernel.dtypes:
                why = f"dtype {str(q.dtype).removeprefix('torch.')} not verified"
            elif q.device.type != kernel.op.device_type or v.device != q.device:
                why = f"tensors on {q.device.type}, kernels built for {kernel.op.device_type}"
            elif bool(kernel.params.get("causal", True)):
                why = "causal=False (verified: True)"
            else:
                unverified = attention_scale_unverified(kernel, scale, head_dim)
                if unverified is None:
                    return kernel, ""
                why = unverified
        return None, why


def _feeds_only(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    return len(node.users) == 1 and user in node.users


def _back_over_casts(node: Any, nodes: list[torch.fx.Node], dropouts: bool) -> Any:
    """Back over float casts (and, after the softmax, dropout that does nothing), each feeding
    the node after it only; returns the first node that is neither."""
    while isinstance(node, torch.fx.Node):
        source = node.args[0] if node.args else None
        if not isinstance(source, torch.fx.Node) or not _feeds_only(source, node):
            return node
        if _float_cast(node) or (dropouts and _idle_dropout_node(node)):
            nodes.append(node)
            node = source
        else:
            return node
    return node


def _float_cast(node: torch.fx.Node) -> bool:
    if node.op != "call_method":
        return False
    if node.target in GRAPH_FIXED_CASTS:
        return len(node.args) == 1 and not node.kwargs
    if node.target == "type_as":
        other = _example_value(node.args[1]) if len(node.args) == 2 else None
        return isinstance(other, torch.Tensor) and other.dtype.is_floating_point and \
            not node.kwargs
    if node.target == "to":
        dtype = node.args[1] if len(node.args) == 2 and not node.kwargs else (
            node.kwargs.get("dtype") if len(node.args) == 1 and set(node.kwargs) == {"dtype"}
            else None)
        return isinstance(dtype, torch.dtype) and dtype.is_floating_point
    return False


def _idle_dropout_node(node: torch.fx.Node) -> bool:
    if not _node_calls(node, GRAPH_DROPOUTS):
        return False
    if node.target is torch.dropout:
        p, training = _node_argument(node, 1, "p", 0.5), _node_argument(node, 2, "train", True)
    else:
        p, training = _node_argument(node, 1, "p", 0.5), _node_argument(node, 2, "training", True)
    return training is False or p == 0


def _softmax_over_last_dim_node(node: Any) -> bool:
    if not _node_calls(node, GRAPH_SOFTMAXES):
        return False
    names = ("input", "dim", "_stacklevel", "dtype") if node.target is F.softmax else \
        ("input", "dim", "dtype")
    if len(node.args) > len(names) or any(k not in names for k in node.kwargs):
        return False
    bound = dict(zip(names, node.args)) | dict(node.kwargs)
    dtype = bound.get("dtype")
    return bound.get("dim") in (-1, 3) and (dtype is None or (
        isinstance(dtype, torch.dtype) and dtype.is_floating_point))


def _transposed_key_node(node: Any) -> torch.fx.Node | None:
    """k, when `node` is k.transpose(-2, -1) (or one of its spellings) of a 4-D k."""
    if not isinstance(node, torch.fx.Node) or not node.args:
        return None
    k = node.args[0]
    if not isinstance(k, torch.fx.Node):
        return None
    if _node_calls(node, (torch.transpose, "transpose")) and len(node.args) == 3 \
            and not node.kwargs:
        dims = {d % 4 if isinstance(d, int) else d for d in node.args[1:]}
        return k if dims == {2, 3} else None
    if _node_calls(node, ("permute",)) and not node.kwargs:
        dims = node.args[1] if len(node.args) == 2 else node.args[1:]
        normalized = tuple(d % 4 if isinstance(d, int) else d for d in dims)
        return k if normalized == (0, 1, 3, 2) else None
    return None


def _match_attention(output: torch.fx.Node) -> _MatchedAttention | None:
    """The chain that ends in `output` = probs @ v, or None where it is no such chain."""
    probs, v = output.args
    if not isinstance(probs, torch.fx.Node) or not isinstance(v, torch.fx.Node) or \
            not _feeds_only(probs, output):
        return None
    nodes = [output]
    node = _back_over_casts(probs, nodes, dropouts=True)
    if not _softmax_over_last_dim_node(node):
        return None
    nodes.append(node)
    scores_input = node.args[0] if node.args else node.kwargs.get("input")
    if not isinstance(scores_input, torch.fx.Node) or not _feeds_only(scores_input, node):
        return None
    node = _back_over_casts(scores_input, nodes, dropouts=False)
    scale = 1.0
    while _node_calls(node, GRAPH_MULTIPLIES + GRAPH_DIVIDES) and len(node.args) == 2 \
            and not node.kwargs:
        left, right = node.args
        if _node_calls(node, GRAPH_MULTIPLIES):
            source, factor = (left, right) if isinstance(left, torch.fx.Node) else (right, left)
            value = _positive_constant_of(factor)
        else:
            source, value = left, _positive_constant_of(right)
            value = None if value is None else 1.0 / value
        if value is None or not isinstance(source, torch.fx.Node) or \
                not _feeds_only(source, node):
            return None
        scale *= value
        nodes.append(node)
        node = _back_over_casts(source, nodes, dropouts=False)
    if not (_node_calls(node, GRAPH_MATMULS) and len(node.args) == 2 and not node.kwargs):
        return None
    q, k = node.args[0], _transposed_key_node(node.args[1])
    if not isinstance(q, torch.fx.Node) or k is None:
        return None
    nodes.append(node)
    nodes.reverse()
    return _MatchedAttention(q, k, v, scale, nodes)
