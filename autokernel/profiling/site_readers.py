"""Small public readers of a recorded op call, for the classifier's rules (each op entry's
`aten_ops` and `patterns`) and the profiling modules: an argument's shape (`arg_shape`) or value
(`arg_value`), whether it is a tensor (`has_tensor`), the call's dtype (`call_dtype`), element
counts (`shape_numel`, `broadcast_numel`), how a shape splits around a dim (`rows_and_cols`,
`single_axis`, `dims_over_axis`, `is_last_dim`, `maybe_last_dim`, `four_dims`) and a norm's width
(`norm_width`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from autokernel.profiling.events import OpCall

PROFILER_DTYPES = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
}



def shape_numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def arg_shape(op: OpCall, index: int) -> list[int]:
    return list(op.shapes[index]) if index < len(op.shapes) else []


def arg_value(op: OpCall, index: int) -> Any:
    return op.args[index] if index < len(op.args) else None


def has_tensor(op: OpCall, index: int) -> bool:
    return bool(arg_shape(op, index))


def call_dtype(op: OpCall, default: str) -> str:
    for name in op.dtypes:
        if name in PROFILER_DTYPES:
            return PROFILER_DTYPES[name]
    return default


def rows_and_cols(x: Sequence[int], dim: Any = -1) -> tuple[int, int] | None:
    if not x:
        return None
    d = dim if isinstance(dim, int) else -1
    if not -len(x) <= d < len(x):
        return None
    n = x[d]
    return (shape_numel(x) // n if n else 0), n


def single_axis(dim: Any, ndim: int) -> int | None:
    """The one dim an op's `dim` argument names, made non-negative; None for none or several."""
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < ndim:
        return None
    return dim % ndim


def dims_over_axis(x: Sequence[int], axis: int) -> tuple[dict[str, int], dict[str, Any]]:
    """Registry dims and params of a row-wise op over dim `axis` of x: (M, N) over the last dim,
    else M = the dims before, N = the axis, K = the dims after it, and the plan's `axis`."""
    named = {"M": shape_numel(x[:axis]), "N": x[axis]}
    if axis == len(x) - 1:
        return named, {}
    return {**named, "K": shape_numel(x[axis + 1:])}, {"axis": axis}


def maybe_last_dim(dim: Any, ndim: int) -> bool:
    """The last dim, or not recorded (a torch that keeps no scalar-list arguments)."""
    return dim is None or is_last_dim(dim, ndim)


def is_last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and dim in (-1, ndim - 1)


def norm_width(op: OpCall) -> int | None:
    """The normalized width of a layer_norm / rms_norm call: its normalized_shape, else its
    weight's size, else x's last dim (argument layouts the two norms share)."""
    normalized = arg_value(op, 1)
    if isinstance(normalized, list) and normalized and all(isinstance(d, int) for d in normalized):
        return shape_numel(normalized)
    weight = arg_shape(op, 2)
    if weight:
        return shape_numel(weight)
    x = arg_shape(op, 0)
    return x[-1] if x else None


def broadcast_numel(a: Sequence[int], b: Sequence[int]) -> int:
    """Elements of the shape a and b broadcast to (torch.matmul's batch)."""
    ndim = max(len(a), len(b))
    a = [1] * (ndim - len(a)) + list(a)
    b = [1] * (ndim - len(b)) + list(b)
    return shape_numel([x if y == 1 else y for x, y in zip(a, b)])


def four_dims(x: Sequence[int]) -> dict[str, int]:
    """[B, H, S, D] from a 4-D tensor; fewer dims get leading ones ([H, S, D] → B = 1)."""
    padded = [1] * (4 - len(x)) + list(x[-4:]) if len(x) < 4 else list(x)
    b = shape_numel(padded[:-3])
    return {"B": b, "H": padded[-3], "S": padded[-2], "D": padded[-1]}
