"""Record the forward's data-flow graph (`graph.Graph`) while torch.profiler times it.

A `TorchFunctionMode` sees every torch call the model's Python code makes, as the model spells
it (`F.linear`, `x * y`, `x.pow(2)`, `torch.max(x, dim)`, `F.gelu(x, approximate="tanh")`),
with its real arguments: the tensors, so that producer → consumer edges are exact (Python object
identity, not op order), and the Python scalars and strings torch.profiler drops (a scale,
`approximate`). Calls made inside a handled call (F.softmax's own `input.softmax`) are not seen,
so a node is one call of the model's code.

Every call that can run an op is wrapped in a profiler range named `CALL_PREFIX<n>`, n its
number within the forward, in every profiled forward; `profiler.record_from_events` ties each op
event to the range around it, so a node's measured time is exact. The graph itself is recorded in
the first profiled forward only (the later ones count calls and open ranges); the forwards of a
model are the same calls in the same order.

Values that do not depend on the model's inputs (parameters, buffers, tensors made by factories,
and whatever is computed from those alone) are constants; a constant square mask's values are
summarized (`mask_pattern`) where an op that applies masks reads it, which is how a mask is
proved causal whatever code built it (`bias[:, :, :T, :T] == 0`, `~mask`, `torch.full(-inf)
.triu(1)`).
"""

from __future__ import annotations

import weakref
from types import FunctionType
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from autokernel.profiling.graph import (
    BUFFER, CALL_PREFIX, INPUT, NODE, PARAMETER, UNKNOWN, Graph, GraphNode, GraphValue,
)

# Calls that read metadata and run no op: no range, no node.
METADATA_CALLS = frozenset({
    "size", "dim", "stride", "numel", "nelement", "ndimension", "is_contiguous", "data_ptr",
    "element_size", "is_floating_point", "is_complex", "storage_offset", "get_device",
    "untyped_storage", "__len__", "__format__", "__repr__", "__hash__", "__index__", "__int__",
    "__float__", "__bool__", "item", "tolist", "is_nonzero", "__array__", "__reduce_ex__",
    "__deepcopy__", "__setstate__", "_record_function_enter_new", "_record_function_exit",
    "_record_function_enter", "has_names", "is_sparse", "__dlpack__",
})
# Attributes whose read makes a tensor (a view); `x.shape`, `x.dtype` and the like do not.
TENSOR_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})
# Python operator spellings -> the op they compute; the reflected ones take their operands
# swapped (`1 - x` is x.__rsub__(1)).
OPERATORS = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add_", "__sub__": "sub", "__rsub__": "sub",
    "__isub__": "sub_", "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_",
    "__truediv__": "div", "__rtruediv__": "div", "__itruediv__": "div_", "__div__": "div",
    "__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow",
    "__ipow__": "pow_", "__neg__": "neg", "__invert__": "bitwise_not", "__and__": "bitwise_and",
    "__rand__": "bitwise_and", "__or__": "bitwise_or", "__ror__": "bitwise_or",
    "__xor__": "bitwise_xor", "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le",
    "__gt__": "gt", "__ge__": "ge", "__getitem__": "getitem", "__setitem__": "setitem_",
    "__abs__": "abs", "__floordiv__": "floor_divide", "__mod__": "remainder",
    # torch's own names of `1 / x` (Tensor.__rtruediv__) and `x /= y` (Tensor.__itruediv__)
    "__rdiv__": "div", "__idiv__": "div_", "__rfloordiv__": "floor_divide",
    "__rmod__": "remainder",
}
REFLECTED = frozenset({"__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rmatmul__",
                       "__rpow__", "__rand__", "__ror__", "__rdiv__", "__rfloordiv__",
                       "__rmod__"})
# Other names of one op (torch.multiply is torch.mul).
ALIASES = {
    "multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div",
    "negative": "neg", "absolute": "abs", "greater": "gt", "less": "lt", "greater_equal": "ge",
    "less_equal": "le", "not_equal": "ne", "concat": "cat", "concatenate": "cat",
    "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim",
    "linalg_vector_norm": "vector_norm", "linalg_norm": "norm", "special_erf": "erf", "special_erfc": "erfc", "special_ndtr": "ndtr", "fix": "trunc",
}
# Ops whose output depends only on an input's shape and dtype, never its values.
SHAPE_ONLY = frozenset({"ones_like", "zeros_like", "full_like", "empty_like", "new_ones",
                        "new_zeros", "new_full", "new_empty", "new_tensor"})
# Ops that apply a mask: a constant square tensor they read gets its `pattern`.
MASK_READERS = frozenset({"masked_fill", "masked_fill_", "where", "add", "add_", "sub", "sub_",
                          "scaled_dot_product_attention", "mul", "mul_", "logical_not",
                          "bitwise_not"})
MASK_PATTERN_MAX_ELEMENTS = 1 << 24
PENDING = "pending"  # a mask whose pattern is read after the profiled forwards
NO_PATTERN = "none"
# A value at or below this fills a masked score (float("-inf"), torch.finfo(dtype).min, -1e9).
MASKED_SCORE = -1e4

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
               torch.float64: "fp64"}


def dtype_label(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def canonical_name(func: Callable[..., Any]) -> tuple[str | None, bool]:
    """(the op a torch call computes, whether its first two operands come swapped), or None for
    a call that reads metadata only."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if name == "__get__":
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        return (attribute if attribute in TENSOR_ATTRIBUTES else None), False
    if name in METADATA_CALLS:
        return None, False
    if name in OPERATORS:
        return OPERATORS[name], name in REFLECTED
    return ALIASES.get(name, name), False


OVER_HEADS = ":heads"  # a mask's pattern suffix: [.., S, 1, S], the scores laid out [B, S, H, S]


def _over_heads(mask: torch.Tensor) -> bool:
    """A [.., S, 1, S] mask: one broadcast over a heads dim between the query and key dims (the
    scores [B, S, H, S] of GPT-BigCode's multi-query attention, heads folded into the rows)."""
    return mask.dim() >= 3 and mask.shape[-2] == 1 and mask.shape[-1] == mask.shape[-3] >= 2


def mask_pattern(mask: torch.Tensor) -> str:
    """What a constant [.., S, S] mask holds, the same over every leading index:
    "keep_lower" (true/1 on and below the diagonal: torch.tril(ones)), "drop_upper" (true/1
    strictly above it: the complement, masked_fill's causal mask), "causal_additive" (0 on and
    below, very negative above: an additive causal mask), "zeros", or "" for anything else; a
    [.., S, 1, S] mask's causal pattern over its query and key dims is suffixed OVER_HEADS."""
    if _over_heads(mask):
        found = mask_pattern(mask.squeeze(-2))
        return f"{found}{OVER_HEADS}" if found in ("keep_lower", "drop_upper", "causal_additive") \
            else ""
    if mask.dim() < 2 or mask.shape[-1] != mask.shape[-2] or mask.shape[-1] < 2 or \
            mask.numel() > MASK_PATTERN_MAX_ELEMENTS or mask.is_complex():
        return ""
    size = mask.shape[-1]
    rows = mask.reshape(-1, size, size)
    lower = torch.ones(size, size, dtype=torch.bool, device=mask.device).tril()
    if rows.dtype == torch.bool:
        values = rows
    else:
        values = rows.float()
        if bool((values == 0).all()):
            return "zeros"
        if bool((values[:, lower] == 0).all()) and bool((values[:, ~lower] <= MASKED_SCORE).all()):
            return "causal_additive"
        if not bool(((values == 0) | (values == 1)).all()):
            return ""
        values = values == 1
    if bool((values == lower).all()):
        return "keep_lower"
    if bool((values == ~lower).all()):
        return "drop_upper"
    return ""


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)


class GraphRecorder(TorchFunctionMode):
    """The mode: `forward(record=...)` around each forward, then `graph`."""

    def __init__(self, model: nn.Module, inputs: Any) -> None:
        super().__init__()
        self.graph = Graph()
        self.calls = 0  # calls numbered so far in this forward
        self.recording = False
        self._seen: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        self._names: dict[Any, tuple[str | None, bool]] = {}
        self._modules: list[str] = []
        self._known: dict[int, tuple[str, str]] = {}  # id(tensor) -> (origin, name)
        for name, param in model.named_parameters():
            self._known[id(param)] = (PARAMETER, name)
        for name, buffer in model.named_buffers():
            self._known[id(buffer)] = (BUFFER, name)
        for path, module in model.named_modules():
            for attr, value in vars(module).items():
                if isinstance(value, torch.Tensor) and id(value) not in self._known:
                    self._known[id(value)] = (BUFFER, f"{path}.{attr}" if path else attr)
        for index, tensor in enumerate(_tensors(inputs)):
            self._known[id(tensor)] = (INPUT, str(index))
        self._keep = list(_tensors(inputs))  # the ids above must not be reused
        # (value, tensor) pairs whose values are read after the profiled forwards.
        self._deferred: list[tuple[GraphValue, torch.Tensor]] = []
        self._model = model

    # -- the forward ------------------------------------------------------------------------

    @contextmanager
    def forward(self, record: bool) -> Iterator[None]:
        """One forward under the mode: its calls numbered from 0, recorded when `record`."""
        self.calls = 0
        self.recording = record
        handles = self._module_hooks() if record else []
        try:
            with scripted_functions_run_as_python(self._model), self:
                yield
        finally:
            for handle in handles:
                handle.remove()
            self.recording = False
            self._modules.clear()

    def _module_hooks(self) -> list[Any]:
        handles = []
        for path, module in self._model.named_modules():
            def enter(_module: nn.Module, _args: Any, path: str = path) -> None:
                self._modules.append(path)

            def leave(_module: nn.Module, _args: Any, _out: Any) -> None:
                if self._modules:
                    self._modules.pop()

            try:
                handles.append(module.register_forward_pre_hook(enter))
                handles.append(module.register_forward_hook(leave))
            except (RuntimeError, TypeError):
                continue  # a TorchScript module
        return handles

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            op, swapped = self._names[func]
        except (KeyError, TypeError):
            op, swapped = canonical_name(func)
            try:
                self._names[func] = (op, swapped)
            except TypeError:
                pass
        if op is None:
            return func(*args, **kwargs)
        index = self.calls
        self.calls += 1
        with torch._C._profiler._RecordFunctionFast(f"{CALL_PREFIX}{index}"):
            out = func(*args, **kwargs)
        if self.recording:
            self._record(index, op, swapped, args, kwargs, out)
        return out

    # -- recording --------------------------------------------------------------------------

    def _record(self, index: int, op: str, swapped: bool, args: tuple[Any, ...],
                kwargs: Mapping[str, Any], out: Any) -> None:
        # `F.silu(x, inplace=True)` (nn.SiLU(inplace=True)) writes x like `x.silu_()` would
        inplace = (op.endswith("_") and not op.endswith("__")) or kwargs.get("inplace") is True
        if swapped and len(args) >= 2:
            args = (args[1], args[0], *args[2:])
        # `torch.mul(a, b, out=buf)` writes a new value of buf: buf is no input of it.
        written = {id(t) for t in _tensors(kwargs.get("out"))}
        kwargs = {k: v for k, v in kwargs.items() if k != "out"} if written else kwargs
        encoded_args = [self._encode(a) for a in args]
        encoded_kwargs = {k: self._encode(v) for k, v in kwargs.items()}
        node = GraphNode(index=index, op=op.rstrip("_") if inplace else op, args=encoded_args,
                         kwargs=encoded_kwargs, module=self._modules[-1] if self._modules else "",
                         inplace=inplace)
        inputs = [self._values_of(t) for t in _tensors((args, kwargs))]
        constant = op in SHAPE_ONLY or all(self.graph.values[v].constant for v in inputs)
        if inplace and args and isinstance(args[0], torch.Tensor):
            out = args[0] if out is None or out is args[0] else out
        outputs = out if isinstance(out, (list, tuple)) else (out,)
        if not any(isinstance(o, torch.Tensor) for o in outputs):
            return
        seen_inputs = {id(t) for t in _tensors((args, kwargs))}
        for item in outputs:
            if not isinstance(item, torch.Tensor):
                node.outputs.append(None)
            elif id(item) in seen_inputs and not inplace and id(item) not in written:
                node.outputs.append(self._values_of(item))  # an alias: x.contiguous(), x.float()
            else:
                node.outputs.append(self._new_value(item, NODE, "", len(self.graph.nodes),
                                                    constant))
        if node.op in MASK_READERS:
            for tensor in _tensors((args, kwargs)):
                self._summarize_mask(tensor)
        self.graph.nodes.append(node)

    def _encode(self, arg: Any) -> Any:
        if isinstance(arg, torch.Tensor):
            return {"value": self._values_of(arg)}
        if arg is None or isinstance(arg, (bool, int, float, str)):
            return arg
        if isinstance(arg, (list, tuple)):  # torch.Size included
            return [self._encode(a) for a in arg]
        if isinstance(arg, slice):
            return {"slice": [self._encode(arg.start), self._encode(arg.stop),
                              self._encode(arg.step)]}
        if arg is Ellipsis:
            return "..."
        if isinstance(arg, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return str(arg)
        if isinstance(arg, complex):
            return str(arg)
        return f"<{type(arg).__name__}>"

    def _values_of(self, tensor: torch.Tensor) -> int:
        """The value id of a tensor the recording may have seen, made on first sight."""
        entry = self._seen.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        origin, name = self._known.get(id(tensor), (UNKNOWN, ""))
        return self._new_value(tensor, origin, name, None, origin in (PARAMETER, BUFFER))

    def _new_value(self, tensor: torch.Tensor, origin: str, name: str, producer: int | None,
                   constant: bool) -> int:
        value = GraphValue(id=len(self.graph.values) + 1, shape=list(tensor.shape),
                           dtype=dtype_label(tensor.dtype), origin=origin, name=name,
                           producer=producer, constant=constant)
        # Strides, not ops: an op run here would be timed as the model's.
        value.contiguous = _dense(list(tensor.shape), list(tensor.stride()))
        if not value.contiguous and tensor.dim() >= 2:
            shape, stride = list(tensor.shape), list(tensor.stride())
            shape[-2:], stride[-2:] = shape[:-3:-1], stride[:-3:-1]
            value.transposed = _dense(shape, stride)
        if constant and tensor.dim() == 0 and not tensor.is_complex():
            self._deferred.append((value, tensor))  # read after the profiled forwards
        self.graph.values[value.id] = value
        self._seen[id(tensor)] = (weakref.ref(tensor), value.id)
        return value.id

    def _summarize_mask(self, tensor: torch.Tensor) -> None:
        entry = self._seen.get(id(tensor))
        if entry is None:
            return
        value = self.graph.values[entry[1]]
        if value.constant and not value.pattern and value.origin != PARAMETER and \
                tensor.dim() >= 2 and (tensor.shape[-1] == tensor.shape[-2] or _over_heads(tensor)):
            value.pattern = PENDING
            self._deferred.append((value, tensor))

    def finish(self) -> Graph:
        """Read the constant values the recording kept (a 0-d scale, a mask's pattern), once the
        profiled forwards are over (they are ops, and would be timed as the model's)."""
        with torch._C.DisableTorchFunction():
            for value, tensor in self._deferred:
                if value.pattern == PENDING:
                    value.pattern = mask_pattern(tensor) or NO_PATTERN
                elif tensor.dim() == 0:
                    value.scalar = float(tensor)
        self._deferred.clear()
        return self.graph


@contextmanager
def scripted_functions_run_as_python(model: nn.Module) -> Iterator[None]:
    """`@torch.jit.script` functions the model's code calls (Megatron's bias_gelu,
    bias_dropout_add) run as the Python they were scripted from while it is recorded: a
    TorchScript function's torch calls are invisible to the mode, its ops to the graph. Found in
    the globals of the model's modules' code (and of the functions and classes defined there, an
    autograd.Function's forward included) and in the modules' attributes."""
    namespaces: dict[int, dict[str, Any]] = {}

    def add_code(obj: Any, depth: int) -> None:
        functions = [obj] if isinstance(obj, FunctionType) else []
        if isinstance(obj, type) and not _library(str(getattr(obj, "__module__", "torch"))):
            methods = [getattr(f, "__func__", f) for c in obj.__mro__ for f in vars(c).values()]
            functions = [f for f in methods if isinstance(f, FunctionType)]
        for function in functions:
            space = function.__globals__
            if id(space) in namespaces or _library(str(space.get("__name__", ""))):
                continue
            namespaces[id(space)] = space
            if depth:
                for value in list(space.values()):
                    add_code(value, depth - 1)

    for module in model.modules():
        add_code(type(module), 2)
        namespaces.setdefault(id(vars(module)), vars(module))
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    for space in namespaces.values():
        for name, value in list(space.items()):
            python = getattr(value, "_torchdynamo_inline", None)
            if isinstance(value, torch.jit.ScriptFunction) and callable(python):
                swapped.append((space, name, value))
                space[name] = python
    try:
        yield
    finally:
        for space, name, value in swapped:
            space[name] = value


def _library(module: str) -> bool:
    """torch's own code (and builtins): never the model's."""
    return module.split(".")[0] in ("torch", "builtins")


def _dense(shape: list[int], stride: list[int]) -> bool:
    """Row-major contiguous (dims of size 1 may have any stride)."""
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride)):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def inputs_of(loaded_inputs: Any) -> Iterable[torch.Tensor]:
    """The model inputs' tensors, for a recorder built elsewhere."""
    return list(_tensors(loaded_inputs))
