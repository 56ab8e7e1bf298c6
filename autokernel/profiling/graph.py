"""The forward as a data-flow graph: which call made each tensor, and which calls read it.

`recorder.py` records it while the profiler runs (one `GraphNode` per torch call the model's
Python code made, at the level the model spells it: `F.linear`, `x * y`, `x.pow(2)`,
`torch.max(x, dim)`), and the classifier matches subgraphs of it by what they compute
(`graph_match.py`). torch.profiler's rows say how long each call took: every op event inside a
call's profiler range (`recorder.CALL_PREFIX`) is that call's, so a node's time is exact, not
inferred from op order.

The model:
- `GraphValue`: one tensor value. Its `origin` says where it came from: a model input, a
  parameter or buffer (`name` is its qualified name), a node's output (`producer`), or nowhere
  the recording saw ("unknown"). `constant` says it does not depend on the model's inputs
  (parameters, buffers, factories and what is computed from them), which is what lets a mask be
  proved causal by its value (`pattern`, `recorder.mask_pattern`) rather than by its shape.
- `GraphNode`: one call. Tensor arguments are `{"value": id}` (lists of them stay lists); Python
  scalars, strings and None are kept as they were passed (the scale, `approximate`, `dim`).
  An in-place call's output is a new value of the same tensor.

Plain Python (no torch import), like `events.py`, so it round-trips through JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

CALL_PREFIX = "autokernel.call:"
"""Name prefix of the profiler ranges around the model's torch calls (`recorder.py`)."""

INPUT = "input"
PARAMETER = "param"
BUFFER = "buffer"
NODE = "node"
UNKNOWN = "unknown"  # made where the recording did not see (a TorchScript function, a hook)


@dataclass
class GraphValue:
    id: int
    shape: list[int]
    dtype: str  # "fp32", "fp16", "bf16", "bool", "int64", "complex64", ...
    origin: str  # INPUT, PARAMETER, BUFFER, NODE or UNKNOWN
    name: str = ""  # a parameter's or buffer's qualified name
    producer: int | None = None  # the node that made it
    constant: bool = False  # independent of the model's inputs
    pattern: str = ""  # a constant square mask's shape of values: recorder.MASK_PATTERNS
    scalar: float | None = None  # the value of a constant 0-d tensor (a scale, a fill value)
    contiguous: bool = True
    transposed: bool = False  # the last two dims of a contiguous tensor, swapped (a view)


@dataclass
class GraphNode:
    index: int  # the call's number within the forward, as in its profiler range's name
    op: str  # canonical name: "linear", "mul", "softmax", "getitem", "T" ...
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: list[int | None] = field(default_factory=list)  # value ids, in output order
    module: str = ""  # the innermost module path it was called in ("" the model)
    inplace: bool = False


@dataclass
class Graph:
    nodes: list[GraphNode] = field(default_factory=list)
    values: dict[int, GraphValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._users: dict[int, list[GraphNode]] | None = None

    # -- queries ---------------------------------------------------------------------------

    def users(self, value: int | None) -> list[GraphNode]:
        """The nodes that read `value`, in call order."""
        if value is None:
            return []
        if self._users is None:
            users: dict[int, list[GraphNode]] = {}
            for node in self.nodes:
                for read in dict.fromkeys(tensor_inputs(node)):
                    users.setdefault(read, []).append(node)
            self._users = users
        return self._users.get(value, [])

    def producer(self, value: int | None) -> GraphNode | None:
        if value is None or value not in self.values:
            return None
        index = self.values[value].producer
        return self.nodes[index] if index is not None and index < len(self.nodes) else None

    def value(self, value: int | None) -> GraphValue | None:
        return self.values.get(value) if value is not None else None

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [asdict(n) for n in self.nodes],
                "values": [asdict(v) for v in self.values.values()]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Graph:
        values = [GraphValue(**v) for v in data.get("values", [])]
        return cls(nodes=[GraphNode(**n) for n in data.get("nodes", [])],
                   values={v.id: v for v in values})


def value_id(arg: Any) -> int | None:
    """The value id of a tensor argument, None for anything else."""
    if isinstance(arg, dict) and "value" in arg:
        return int(arg["value"])
    return None


def _tensors_in(arg: Any) -> Iterator[int]:
    found = value_id(arg)
    if found is not None:
        yield found
    elif isinstance(arg, (list, tuple)):
        for item in arg:
            yield from _tensors_in(item)


def tensor_inputs(node: GraphNode) -> list[int]:
    """Every tensor the node reads, positional then keyword, lists flattened."""
    found = [v for arg in node.args for v in _tensors_in(arg)]
    found += [v for arg in node.kwargs.values() for v in _tensors_in(arg)]
    return found


def argument(node: GraphNode, index: int, name: str, default: Any = None) -> Any:
    """A call's argument by position or by keyword (`x.mean(-1)` and `x.mean(dim=-1)`)."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)
