"""One spelling for many: recognizers of the pieces ops are written with, on the graph.

Each takes a value (or a call) and answers what it computes, whatever the spelling, or None:
- `square_of`: pow(x, 2), x ** 2, x * x, torch.square(x);
- `silu_of`: F.silu(x), x * torch.sigmoid(x), sigmoid(x) * x;
- `gelu_of`: F.gelu(x, approximate), and the erf and tanh formulas written out
  (0.5·x·(1 + erf(x/√2)); 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), minGPT's NewGELU and
  HF's FastGELU);
- `amax_of`: x.amax(d), torch.max(x, d).values, torch.max(x, d)[0];
- `mean_of`: x.mean(d), torch.var_mean(..)[1], x.sum(d) / n;
- `variance_of`: x.var(d, unbiased=False), var_mean(..)[0], mean((x - mean)²);
- `rms_of`: sqrt(mean(x²) + eps) and its reciprocal, vector_norm(x) / √d, norm(x) · d^-½.

`region` collects every call between an op's inputs and its output, side branches that only
make constants included (a mask's `==`, a scale's `torch.full`), for a pattern to claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autokernel.profiling.graph import GraphNode, argument, tensor_inputs, value_id
from autokernel.profiling.graph_match import (
    CASTS, TRANSPARENT, GraphContext, dim_list, first_input,
)

GELU_TANH_COEFFICIENT = math.sqrt(2.0 / math.pi)  # 0.7978845608...
REGION_LIMIT = 200  # calls: a region larger than this is not one op


def close(value: float | None, target: float, rel: float = 1e-3) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=rel)


def operands(node: GraphNode) -> tuple[Any, Any]:
    return (node.args[0] if node.args else None,
            argument(node, 1, "other", argument(node, 1, "exponent")))


def square_of(gctx: GraphContext, value: int | None) -> int | None:
    node = gctx.made_by(value, "pow", "mul", "square")
    if node is None:
        return None
    if node.op == "square":
        return gctx.base(first_input(node))
    a, b = operands(node)
    if node.op == "pow":
        return gctx.base(value_id(a)) if close(gctx.scalar(b), 2.0, 1e-9) else None
    if value_id(a) is not None and gctx.base(value_id(a)) == gctx.base(value_id(b)):
        return gctx.base(value_id(a))
    return None


def silu_of(gctx: GraphContext, value: int | None) -> int | None:
    node = gctx.made_by(value, "silu", "mul")
    if node is None:
        return None
    if node.op == "silu":
        return gctx.base(first_input(node))
    a, b = (value_id(v) for v in operands(node))
    for gate, other in ((a, b), (b, a)):
        sigmoid = gctx.made_by(gate, "sigmoid")
        if sigmoid is not None and other is not None and \
                gctx.base(first_input(sigmoid)) == gctx.base(other):
            return gctx.base(other)
    return None


def _elementwise_region(gctx: GraphContext, value: int | None, limit: int = 16
                        ) -> list[GraphNode]:
    """The elementwise calls behind `value`, nearest first, up to `limit`."""
    found: list[GraphNode] = []
    pending = [value]
    seen: set[int] = set()
    while pending and len(found) < limit:
        current = pending.pop(0)
        node = gctx.producer(current)
        if node is None or id(node) in seen or node.op not in ELEMENTWISE | CASTS:
            continue
        seen.add(id(node))
        found.append(node)
        pending.extend(tensor_inputs(node))
    return found


def _number(gctx: GraphContext, arg: Any) -> float | None:
    """A number, a constant 0-d tensor's value, or the fill of `torch.ones_like(x)` (Megatron
    writes GELU's 1 so)."""
    found = gctx.scalar(arg)
    if found is None and gctx.made_by(value_id(arg), "ones_like", "new_ones") is not None:
        return 1.0
    return found


def _closed_region(gctx: GraphContext, value: int | None, x: int) -> list[GraphNode] | None:
    """The elementwise calls from `value` back to x, when every other tensor they read is a
    constant or a shape-only fill of x (`ones_like(x)`); else None."""
    found: dict[int, GraphNode] = {}
    pending = [value]
    while pending:
        current = pending.pop()
        if current is None or gctx.base(current) == x:
            continue
        node = gctx.producer(current)
        if node is None or node.op not in ELEMENTWISE | CASTS:
            if _number(gctx, {"value": current}) is None and not (
                    gctx.value(current) and gctx.value(current).constant):
                return None
            continue
        if id(node) not in found:
            found[id(node)] = node
            if len(found) > 24:
                return None
            pending.extend(tensor_inputs(node))
    return list(found.values())


ELEMENTWISE = frozenset({"mul", "add", "sub", "div", "pow", "erf", "erfc", "tanh", "neg",
                         "sigmoid", "exp", "rsqrt", "sqrt", "reciprocal", "square"})


@dataclass(frozen=True)
class Gelu:
    x: int
    approximate: str  # "none" or "tanh"
    spelled_out: bool


def gelu_of(gctx: GraphContext, value: int | None) -> Gelu | None:
    node = gctx.made_by(value, "gelu", "mul", "div")
    if node is None:
        return None
    if node.op == "gelu":
        approximate = argument(node, 1, "approximate", "none")
        return Gelu(gctx.base(first_input(node)), str(approximate or "none"), False)
    if node.op == "mul":  # x · Φ(x), Φ written torch.special.ndtr
        a, b = (value_id(v) for v in operands(node))
        for cdf, x in ((a, b), (b, a)):
            ndtr = gctx.made_by(cdf, "ndtr")
            if ndtr is not None and x is not None and gctx.base(first_input(ndtr)) == \
                    gctx.base(x):
                return Gelu(gctx.base(x), "none", True)
    calls = _elementwise_region(gctx, value)
    special = [n for n in calls if n.op in ("erf", "tanh", "erfc")]
    if len(special) != 1:
        return None
    inner = special[0]
    scalars = {s for n in calls for s in (_number(gctx, a) for a in n.args[:2]) if s is not None}
    # 0.5·x·(...) or x·(...)/2, and the 1 + erf(..) / 1 + tanh(..) (erfc(-z) is 1 + erf(z))
    if not (any(close(s, 0.5) for s in scalars) or any(close(s, 2.0) for s in scalars)):
        return None
    if inner.op != "erfc" and not any(close(s, 1.0) for s in scalars):
        return None
    outer_inputs = {gctx.base(v) for n in calls if n is not inner and n.op == "mul"
                    for v in tensor_inputs(n)}
    inner_calls = _elementwise_region(gctx, first_input(inner))
    inner_inputs = {gctx.base(v) for n in inner_calls for v in tensor_inputs(n)}
    inner_inputs.add(gctx.base(first_input(inner)))
    candidates = [x for x in outer_inputs & inner_inputs
                  if x is not None and gctx.producer(x) not in calls]
    if len(candidates) != 1:  # x made by an elementwise call too (Megatron's bias + y)
        closed = [(len(found), x) for x in outer_inputs & inner_inputs if x is not None
                  for found in [_closed_region(gctx, value, x)] if found and inner in found]
        candidates = [min(closed)[1]] if closed else []
    if len(candidates) != 1:
        return None
    inner_scalars = {s for n in inner_calls for s in (gctx.scalar(a) for a in n.args[:2])
                     if s is not None}
    if inner.op == "erfc":  # 0.5·x·erfc(-x/√2): the argument negated an odd number of times
        signs = sum(n.op == "neg" for n in inner_calls) + sum(
            s < 0 for n in inner_calls for s in (gctx.scalar(a) for a in n.args[:2])
            if s is not None)
        inner_scalars = {abs(s) for s in inner_scalars}
        if signs % 2 == 0:
            return None
    if inner.op in ("erf", "erfc"):
        if any(close(s, 1 / math.sqrt(2)) or close(s, math.sqrt(2)) for s in inner_scalars):
            return Gelu(candidates[0], "none", True)
        return None
    if any(close(s, 0.044715) for s in inner_scalars) and (
            any(close(s, GELU_TANH_COEFFICIENT, 1e-4) for s in inner_scalars)
            or any(close(s, 2 / math.pi, 1e-4) for s in inner_scalars)):
        return Gelu(candidates[0], "tanh", True)
    return None


@dataclass(frozen=True)
class Reduction:
    x: int  # the reduced tensor (its base)
    dim: int  # non-negative
    node: GraphNode


def _reduction(gctx: GraphContext, node: GraphNode) -> Reduction | None:
    x = first_input(node)
    shape = gctx.shape(x)
    dims = dim_list(argument(node, 1, "dim"), len(shape))
    if dims is None or len(dims) != 1:
        return None
    return Reduction(gctx.base(x), same_dim(gctx.shape(x), gctx.shape(gctx.base(x)), dims[0]),
                     node)


def same_dim(shape: list[int], before: list[int], dim: int) -> int:
    """`dim` of a view of shape `shape` as a dim of the tensor of shape `before` it views: the
    last dim of `X.view(-1, d)` is the last of X (views that merge or split only the leading
    dims keep it)."""
    if shape == before or not before or dim != len(shape) - 1 or before[-1] != shape[-1]:
        return dim
    return len(before) - 1


def row_source(gctx: GraphContext, square: int | None, x: int, dim: int) -> tuple[int, int]:
    """(x, dim) of a row reduction over `dim` of `square` (x², read through views of x):
    x's base and the dim there, or, where a view between them re-splits the reduced dim (a
    [B, S, H·D] projection viewed [B, S, H, D] and normalized per head), the latest view of x
    whose trailing dim is still the reduced row."""
    shape, before = gctx.shape(square), gctx.shape(x)
    mapped = same_dim(shape, before, dim)
    if not shape or dim >= len(shape) or (mapped < len(before)
                                          and before[mapped] == shape[dim]):
        return x, mapped
    node = gctx.made_by(square, "pow", "mul", "square")
    value = value_id(node.args[0]) if node is not None and node.args else None
    if value is None or gctx.shape(value)[-1:] != shape[-1:] or dim != len(shape) - 1:
        return x, mapped
    while True:  # back through casts and copies that keep the row
        producer = gctx.producer(value)
        source = value_id(producer.args[0]) if producer is not None and producer.args else None
        if producer is None or producer.op not in TRANSPARENT or source is None or \
                gctx.shape(source) != gctx.shape(value):
            return value, len(gctx.shape(value)) - 1
        value = source


def amax_of(gctx: GraphContext, value: int | None) -> Reduction | None:
    node = gctx.made_by(value, "amax", "max")
    if node is None:
        return None
    if node.op == "max" and (gctx.base(value) != node.outputs[0] if node.outputs else True):
        return None  # max's indices, or torch.max(x) of the whole tensor
    return _reduction(gctx, node)


def mean_of(gctx: GraphContext, value: int | None) -> Reduction | None:
    node = gctx.made_by(value, "mean", "var_mean", "div", "mul")
    if node is None:
        return None
    if node.op == "mean":
        return _reduction(gctx, node)
    if node.op == "var_mean":
        found = _reduction(gctx, node)
        return found if found and len(node.outputs) > 1 and \
            gctx.base(value) == node.outputs[1] else None
    a, b = operands(node)
    total = gctx.made_by(value_id(a), "sum")
    found = _reduction(gctx, total) if total is not None else None
    if found is None:
        return None
    n = gctx.shape(first_input(total))[found.dim]
    divisor = gctx.scalar(b)
    if (node.op == "div" and close(divisor, n)) or (node.op == "mul" and close(divisor, 1 / n)):
        return Reduction(found.x, found.dim, total)
    return None


def _unbiased(node: GraphNode) -> bool:
    correction = node.kwargs.get("correction")
    if correction is not None:
        return correction != 0
    unbiased = argument(node, 2, "unbiased", True)
    return bool(unbiased)


def variance_of(gctx: GraphContext, value: int | None, x: int | None) -> Reduction | None:
    """The population variance of x over one dim (what a LayerNorm divides by)."""
    node = gctx.made_by(value, "var", "var_mean", "mean", "div", "mul")
    if node is None:
        return None
    if node.op in ("var", "var_mean"):
        found = _reduction(gctx, node)
        if found is None or found.x != x or _unbiased(node):
            return None
        return found if node.op == "var" or gctx.base(value) == node.outputs[0] else None
    found = _reduction(gctx, node) if node.op == "mean" else mean_of(gctx, value)
    centered = square_of(gctx, first_input(found.node)) if found else None
    sub = gctx.made_by(centered, "sub")
    if sub is None or gctx.base(first_input(sub)) != x:
        return None
    mean = mean_of(gctx, value_id(operands(sub)[1]))
    return found if mean is not None and mean.x == x and mean.dim == found.dim else None


@dataclass(frozen=True)
class Rms:
    x: int
    dim: int
    eps: float | None
    reciprocal: bool  # the value is 1/rms (rsqrt), to multiply by; else rms, to divide by
    eps_outside: bool = False  # eps added to the root, not under it (vector_norm / √d + eps)


def rms_of(gctx: GraphContext, value: int | None) -> Rms | None:
    """sqrt(mean(x²) + eps), rsqrt(..), 1 / sqrt(..), or vector_norm(x) / √d (+ eps)."""
    node = gctx.made_by(value, "rsqrt", "sqrt", "reciprocal", "div", "mul", "add",
                        "vector_norm", "norm", "pow")
    if node is None:
        return None
    if node.op == "pow":  # (..) ** -0.5, (..) ** 0.5
        root = root_power(gctx, node)
        if root is None:
            return None
        mean_square, eps = plus_eps(gctx, first_input(node))
        found = mean_of(gctx, mean_square)
        x = square_of(gctx, first_input(found.node)) if found else None
        if x is None:
            return None
        x, dim = row_source(gctx, first_input(found.node), x, found.dim)
        return Rms(x, dim, eps, root == "rsqrt")
    if node.op in ("rsqrt", "sqrt"):
        mean_square, eps = plus_eps(gctx, first_input(node))
        found = mean_of(gctx, mean_square)
        x = square_of(gctx, first_input(found.node)) if found else None
        if x is None:
            return None
        x, dim = row_source(gctx, first_input(found.node), x, found.dim)
        return Rms(x, dim, eps, node.op == "rsqrt")
    if node.op == "reciprocal" or (node.op == "div" and close(gctx.scalar(node.args[0]), 1.0)):
        inner = rms_of(gctx, first_input(node) if node.op == "reciprocal"
                       else value_id(operands(node)[1]))
        return Rms(inner.x, inner.dim, inner.eps, True) if inner and not inner.reciprocal \
            else None
    if node.op == "add":
        root, eps = plus_eps(gctx, value)
        inner = rms_of(gctx, root) if root != gctx.base(value) else None
        if inner is None or inner.reciprocal or inner.eps is not None:
            return None
        return Rms(inner.x, inner.dim, eps, False, eps_outside=True)
    return _norm_over_root_d(gctx, node)


def root_power(gctx: GraphContext, node: GraphNode | None) -> str | None:
    """"rsqrt" for v ** -0.5 (torch.pow(v, -0.5)), "sqrt" for v ** 0.5, else None."""
    if node is None or node.op != "pow" or value_id(node.args[0] if node.args else None) is None:
        return None
    exponent = gctx.scalar(operands(node)[1])
    return "rsqrt" if close(exponent, -0.5, 1e-9) else "sqrt" if close(exponent, 0.5, 1e-9) \
        else None


def _norm_over_root_d(gctx: GraphContext, node: GraphNode) -> Rms | None:
    """||x||₂ / √d or ||x||₂ · d^-½ over one dim: the root mean square."""
    norm = node
    factor = 1.0
    if node.op in ("div", "mul"):
        a, b = operands(node)
        norm = gctx.made_by(value_id(a), "vector_norm", "norm")
        scalar = gctx.scalar(b)
        if norm is None or scalar is None or scalar == 0:
            return None
        factor = 1 / scalar if node.op == "div" else scalar
    order = argument(norm, 1, "ord", argument(norm, 1, "p", 2))
    x = first_input(norm)
    dims = dim_list(argument(norm, 2, "dim"), len(gctx.shape(x)))
    if order not in (2, 2.0, "fro") or dims is None or len(dims) != 1:
        return None
    width = gctx.shape(x)[dims[0]]
    if not close(factor, width ** -0.5):
        return None
    return Rms(gctx.base(x), dims[0], None, False)


def plus_eps(gctx: GraphContext, value: int | None) -> tuple[int | None, float | None]:
    """(v, eps) for v + eps (eps a Python number or constant), else (value, None)."""
    node = gctx.made_by(value, "add")
    if node is None:
        return gctx.base(value), None
    a, b = operands(node)
    for tensor, scalar in ((a, b), (b, a)):
        eps = gctx.scalar(scalar)  # a number, or a constant 0-d tensor (an eps buffer)
        if eps is not None and value_id(tensor) is not None and (
                value_id(scalar) is None or gctx.shape(value_id(scalar)) == []):
            return gctx.base(value_id(tensor)), eps
    return gctx.base(value), None


def region(gctx: GraphContext, output: int | None, inputs: set[int | None],
           tables: frozenset[int] = frozenset()) -> list[GraphNode] | None:
    """Every call on a path from `inputs` to `output`, with the constant side branches feeding
    them (a mask's `== 0`, a scale's `torch.full`, a weight's `1 + w`), in call order.

    None when the region reads a non-constant value that is neither one of `inputs` nor made
    from them (the inputs given were not all the op's: a caller must not claim upstream work),
    reaches a claimed call, or runs past REGION_LIMIT. `tables` are values made from constants
    and `inputs` alone (cos/sin gathered by position ids): shared like constants."""
    def fixed(value: int) -> bool:
        return gctx.value(value).constant or value in tables

    found: dict[int, GraphNode] = {}
    pending = [output]
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if value is None or value in seen or value in inputs:
            continue
        seen.add(value)
        node = gctx.producer(value)
        if node is None:
            if not gctx.value(value) or not gctx.value(value).constant:
                return None  # a model input or an unknown tensor the inputs did not name
            continue
        if id(node) in found:
            continue
        if gctx.is_claimed(node):
            if all(fixed(v) for v in node.outputs if v is not None):
                continue  # a table or mask another call's region took: shared, read here
            return None
        if len(found) >= REGION_LIMIT:
            return None
        found[id(node)] = node
        pending.extend(tensor_inputs(node))
    calls = sorted(found.values(), key=lambda n: n.index)
    reached = {v for v in inputs if v is not None}
    for node in calls:
        if any(v in reached for v in tensor_inputs(node)):
            reached.update(v for v in node.outputs if v is not None)
        elif not all(fixed(v) for v in node.outputs if v is not None):
            return None
    return calls
