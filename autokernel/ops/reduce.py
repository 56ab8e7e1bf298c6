"""reduce: out[M] = x[M, N].sum(-1), accumulated in float32 and returned in x's dtype.

Over a dim that is not the last, a shape (M, N, K) is out[M, K] = x[M, N, K].sum(1) (see
`OpSpec.axis_dim`): the same sums, each over N elements K apart.

`params.op` picks the reduction: "sum" (the default, what a plan without `op` means), "mean"
(x.mean(dim): the float32 sum divided by N) or "amax" (x.amax(dim): the largest element, NaN
where the row holds one, as torch.amax). Each op is a target of its own (the role: "" for sum,
"mean", "amax"), verified at that op and routed only for that op's calls. A kernel file's
`kernel_fn(x)` and `kernel_fn(x, axis)` stay valid for sums: the op is a trailing argument, passed
only when it is not "sum". torch.max(x, dim) returns the indices too: it is an amax where they
go unused (`.values`, `[0]`), and verify routes such a call only where the caller's code proves
they do (`_indices_unused`).
"""

from __future__ import annotations

import dis
import math
import sys
from collections.abc import Mapping
from types import CodeType, FrameType
from typing import Any

import torch

from autokernel import reference
from autokernel.integrate.attention_chain import NOT_MINE
from autokernel.integrate.custom_ops import saved_inputs
from autokernel.integrate.integration import CallRoute, Integration, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    REQUIRED,
    bind_arguments,
    call_refusal,
    input_over_one_dim,
    over_axis_caller,
)
from autokernel.integrate.plans import argument_getter, argument_runner, run_planner
from autokernel.ops.spec import (
    DEFAULT_TOLERANCES,
    AdversarialCase,
    AtenRule,
    InputMaker,
    Inputs,
    OpSpec,
    Shape,
    Tolerance,
    along_axis,
    element_size,
    rows_and_width,
    sample,
)
from autokernel.profiling.callsites import Extracted
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    dims_over_axis,
    shape_numel,
    single_axis,
)
from autokernel.profiling.events import OpCall
from autokernel.profiling.graph_match import GraphContext

DIMS = ("M", "N")

# A row sum's magnitude grows like sqrt(N) (signed values) or N (positive ones), so the inputs
# shrink with N to keep every sum inside fp16's range (max 65504):
# - "large": sigma = min(1e3, LARGE_SUM_SCALE / sqrt(N)), a row sum's sigma is at most 4e3, and
#   7-sigma rows stay finite;
# - "positive": values in [0, min(1, POSITIVE_SUM_SCALE / N)), a row sum is about 8192 at most.
LARGE_SUM_SCALE = 4.0e3
POSITIVE_SUM_SCALE = 16384.0


OPS = ("sum", "mean", "amax")
STOCK_OPS = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax}


def stock_sum(x: torch.Tensor, axis: int = -1, op: str = "sum") -> torch.Tensor:
    # torch.sum/mean accumulate fp16/bf16 in float32 and return x's dtype, like the reference.
    return STOCK_OPS[op](x, dim=axis)


def with_op(maker: InputMaker) -> InputMaker:
    """`maker`'s inputs followed by the reference's trailing op argument, for a target whose op
    is not "sum" (after the axis, -1 when `maker` gave none): a sum's inputs stay (x) or
    (x, 1), so a sum kernel written before ops gets the arguments it takes."""
    def make(shape: Shape, dtype: torch.dtype, device: str | torch.device,
             generator: torch.Generator, distribution: str = "normal", op: str = "sum",
             **params: Any) -> Inputs:
        if op not in OPS:
            raise ValueError(f"reduce op {op!r}: choose one of {', '.join(OPS)}")
        inputs = maker(shape, dtype, device, generator, distribution, **params)
        if op == "sum":
            return inputs
        return (*inputs, -1, op) if len(inputs) == 1 else (*inputs, op)

    return make


def _row_values(
    shape: Shape, device: str | torch.device, generator: torch.Generator, distribution: str
) -> torch.Tensor:
    n = shape[-1]
    large_scale = min(1.0e3, LARGE_SUM_SCALE / math.sqrt(n))
    x = sample(shape, torch.float32, device, generator, distribution, large_scale=large_scale)
    if distribution == "positive":
        x = x * min(1.0, POSITIVE_SUM_SCALE / n)
    return x


def _row_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    return (_row_values(shape, device, generator, distribution).to(dtype),)


make_inputs = with_op(along_axis(_row_inputs))


def flops(shape: Shape) -> float:
    # One add per element.
    m, n = rows_and_width(shape)
    return float(m * n)


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = rows_and_width(shape)
    return (m * n + m) * element_size(dtype)  # x read once, one sum per row written


def _cancelling_pairs(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    # Half of each row is +a / -a pairs at random places, the rest small integers in [-3, 3].
    # Every value is an integer and |any partial sum| <= n·a <= 2^24, so float32 sums them
    # exactly in any order: the answer (the small integers' sum) is exact whatever a correct
    # kernel's order. An fp16/bf16 accumulator loses the small terms next to a running sum of big
    # ones, or overflows.
    a = float(2 ** min(14, int(math.log2((1 << 24) // n))))
    pairs = n // 4
    values = torch.randint(-3, 4, (m, n), generator=generator, device=device).float()
    values[:, : 2 * pairs : 2] = a
    values[:, 1 : 2 * pairs : 2] = -a
    order = torch.rand((m, n), generator=generator, device=device).argsort(dim=1)
    return (values.gather(1, order).to(dtype),)


def _positive_long_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    # Positive values whose row sum is about 8192 whatever n: a half-precision running sum stops
    # growing once it is 2^11 (fp16) or 2^8 (bf16) times a term.
    values = torch.rand((m, n), generator=generator, device=device) * (POSITIVE_SUM_SCALE / n)
    return (values.to(dtype),)


def _edge_columns(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    # Zero rows except the first and last column, distinct integers per row: a dropped first or
    # tail chunk, an off-by-one mask, or a row read at the wrong stride gives a wrong sum.
    values = torch.zeros((m, n), device=device)
    values[:, 0] = torch.randint(-200, 201, (m,), generator=generator, device=device).float()
    values[:, -1] += torch.randint(-200, 201, (m,), generator=generator, device=device).float()
    return (values.to(dtype),)


def _all_negative_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    # Every value in -[0.5, 1.5) (scaled like "positive" so a row's sum stays finite in fp16): a
    # max seeded with 0, or masked lanes that load 0 into a max, answers 0.
    values = -(0.5 + torch.rand((m, n), generator=generator, device=device))
    return ((values * min(1.0, POSITIVE_SUM_SCALE / n)).to(dtype),)


def _nan_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    # Every other row holds one NaN (in its first, last or a random column), the rest are finite
    # and all-negative: torch's sum, mean and amax answer NaN exactly for those rows. Triton's
    # maximum drops NaN (tl.max of [NaN, -1] is -1), so an amax kernel must carry it itself.
    values = -(0.5 + torch.rand((m, n), generator=generator, device=device))
    columns = torch.randint(0, n, (m,), generator=generator, device=device)
    columns[0:m:6], columns[2:m:6] = 0, n - 1
    rows = torch.arange(0, m, 2, device=device)
    values[rows, columns[rows]] = float("nan")
    return (values.to(dtype),)


ADVERSARIAL = (
    AdversarialCase(
        "nan_rows",
        "one NaN in every other row (first, last or a random column): torch answers NaN for "
        "those rows; Triton's max drops NaN, so an amax that does not carry it answers a number",
        with_op(along_axis(_nan_rows)),
        nonfinite_reference=True,
    ),
    AdversarialCase(
        "cancelling_pairs",
        "big ±a pairs (a up to 2^14) cancel among small integers: the exact answer is small; a "
        "half-precision accumulator swamps or overflows",
        with_op(along_axis(_cancelling_pairs)),
    ),
    AdversarialCase(
        "positive_long_rows",
        "positive values summing to ~8192 whatever N: a half-precision running sum stalls "
        "(swamping) on long rows",
        with_op(along_axis(_positive_long_rows)),
    ),
    AdversarialCase(
        "edge_columns",
        "zeros except the first and last column of each row: a dropped first/tail chunk, an "
        "off-by-one mask or a wrong row stride shows as a wrong integer",
        with_op(along_axis(_edge_columns)),
    ),
    AdversarialCase(
        "all_negative_rows",
        "every value negative: a max seeded with 0, or masked lanes loading 0 into a max, "
        "answers 0",
        with_op(along_axis(_all_negative_rows)),
    ),
)


# A sum is a reduce target only when it is big enough to be worth a kernel of its own.
REDUCE_MIN_ELEMENTS = 1 << 16
REDUCE_MIN_ROW = 32


def _reduction_shape(op: OpCall, reduction: str) -> Extracted:
    x = arg_shape(op, 0)
    if not x:
        return None
    # aten::sum(self, dtype) and aten::mean(self, dtype) reduce the whole tensor, as does
    # aten::amax(self, dim=[]); their .dim overloads name the dims.
    if len(op.shapes) <= 2 or arg_value(op, 1) == []:
        named: dict[str, int] = {"M": 1, "N": shape_numel(x)}
        params: dict[str, Any] = {}
    else:
        axis = single_axis(arg_value(op, 1), len(x))
        trailing = _trailing_dims(arg_value(op, 1), len(x)) if axis is None else None
        if trailing is not None:  # the last dims, contiguous: one row-wise reduction over them
            named, params = {"M": shape_numel(x[:trailing]), "N": shape_numel(x[trailing:])}, {}
        elif axis is None:  # several dims, not the trailing ones: not one row-wise reduction
            return None
        else:
            named, params = dims_over_axis(x, axis)
    if shape_numel(x) < REDUCE_MIN_ELEMENTS or named["N"] < REDUCE_MIN_ROW:
        return None
    return named, (params if reduction == "sum" else {**params, "op": reduction})


def _trailing_dims(dim: Any, ndim: int) -> int | None:
    """The first of several dims `dim` names when they are x's last ones ((-2, -1)), else None."""
    if not isinstance(dim, (list, tuple)) or len(dim) < 2 or not all(
            isinstance(d, int) and not isinstance(d, bool) and -ndim <= d < ndim for d in dim):
        return None
    dims = sorted({d % ndim for d in dim})
    return dims[0] if len(dims) == len(dim) and dims == list(range(dims[0], ndim)) else None


def _rule(reduction: str) -> AtenRule:
    """The profiler's rule for one reduction's aten op: a target per op (its role; a sum's is
    ""), so a mean is never verified as a sum or routed to a sum's kernel."""
    return AtenRule(lambda op, ctx: _reduction_shape(op, reduction), root_only=True,
                    role=None if reduction == "sum" else (lambda op, ctx: reduction))


def _find_max_values(gctx: GraphContext) -> None:
    """torch.max(x, dim).values and torch.max(x, dim)[0] are an amax, when the indices go
    unused (an argmax is another op)."""
    for node in gctx.graph.nodes:
        if node.op != "max" or gctx.is_claimed(node) or len(node.outputs) != 2 or \
                gctx.graph.users(node.outputs[1]):
            continue
        op = gctx.root_op(node)
        extracted = _reduction_shape(op, "amax") if op is not None else None
        if extracted is None:
            continue
        named, params = extracted
        site = gctx.site("reduce", [node], "aten::max", named, params,
                         gctx.dtype(node.outputs[0]), role="amax")
        gctx.claim([node], "reduce", site)


def _op_tolerances(params: Mapping[str, Any]) -> Mapping[torch.dtype, Tolerance] | None:
    op = params.get("op", "sum")
    if op == "amax":
        # The answer is one of the inputs, exact in every dtype; the harness still lets one
        # representable step pass.
        return {dtype: Tolerance(atol=0.0, rtol=0.0) for dtype in DEFAULT_TOLERANCES}
    if op == "mean":
        # The sum's float32 atol covers an absolute rounding error of ~4e-3 on a sum near 0;
        # divided by N it is ~4e-3 / N, within the default 1e-4 for the rows targets have.
        return DEFAULT_TOLERANCES
    return None


SPEC = OpSpec(
    name="reduce",
    dims=DIMS,
    reference=reference.reduce,
    stock=stock_sum,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 1000),
    sweep=(
        (4096, 4096),
        (8192, 8192),
        (16384, 8192),
        (1024, 32768),
        (32768, 4096),
        (4096, 11008),  # LLaMA-7B MLP width
        (2048, 50257),
        (8, 1 << 20),
        (1, 1 << 24),  # one long row: needs a split over the row to use the GPU
        (32, 4096, 256),  # over dim 1 of x[32, 4096, 256] (KernelBench 47)
    ),
    cpu_sweep=(
        (1, 1),
        (1, 5000),
        (7, 300),
        (33, 1025),
        (64, 64),
        (3, 70000),  # over several split-sized chunks: exercises both stages of split_n
        (5, 2049),
        # Over dim 1: a short inner run (masked lanes) and a wide one (several inner blocks).
        (3, 40, 5),
        (2, 300, 33),
    ),
    edge_shapes=((1023, 4097), (4097, 1537), (1537, 1023), (65537, 1), (1, 1 << 20),
                 (16, 1023, 4097), (1, 65537, 3)),
    cpu_edge_shapes=((1, 3), (17, 1), (1, 4097), (13, 1537), (31, 1023), (1, 1, 7),
                     (2, 1537, 3)),
    bench_shapes=((8192, 8192), (16384, 8192), (1024, 32768)),
    adversarial=ADVERSARIAL,
    # A reduction inside another op (aten::mean's sum) is not one the model asked for.
    aten_ops={"aten::sum": _rule("sum"), "aten::mean": _rule("mean"), "aten::amax": _rule("amax")},
    graph_patterns=(_find_max_values,),
    axis_dim="K",
    tolerances={
        **DEFAULT_TOLERANCES,
        # A float32 row sum carries an absolute rounding error ~ eps·sigma·sqrt(N)·(a few), in
        # the candidate and in a float32 oracle alike, while its value can be near 0: at the
        # default atol 1e-4 a correct kernel fails on the rows of "large" inputs whose sum
        # happens to cancel (measured: 10 of 8192 rows at 8192x8192). With the input scaling
        # above that error stays below ~4e-3 at every N, so 1e-2 passes correct kernels and is
        # still 1e-4 of a typical row sum (one dropped element or a half-precision accumulator
        # is caught).
        torch.float32: Tolerance(atol=1e-2, rtol=1e-4),
    },
    op_tolerances=_op_tolerances,
    # A row's sum (or mean) may cancel to ~0 while its rounding error is ~eps * sum |x| (see the
    # float32 atol above): a bound relative to the outputs would fail correct kernels there.
    cancelling=True,
    notes="sum (or params.op: mean, amax) over the last dim (or over dim 1 of x[M, N, K]), "
    "float32 accumulation, output in x's dtype; FLOPs = M·N·K (one add or max per element); "
    "bytes = read x + write M·K results. Inputs shrink with N so sums stay finite in fp16.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _fake_reduce(x: torch.Tensor, axis: int = -1, op: str = "sum") -> torch.Tensor:
    kept = list(x.shape)
    del kept[axis]
    return x.new_empty(kept)


def _reduce_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    args, out = saved_inputs(ctx)
    x, axis = args[0], (args[1] if len(args) > 1 else -1)
    op = args[2] if len(args) > 2 else "sum"
    grad = grad.unsqueeze(axis)
    if op == "mean":
        grad = grad / x.shape[axis]
    elif op == "amax":
        # torch.amax's rule: the gradient is shared evenly among the elements equal to the max.
        hit = x == out.unsqueeze(axis)
        grad = grad * hit / hit.sum(dim=axis, keepdim=True)
    return (grad.expand(x.shape).to(x.dtype), *[None] * (len(args) - 1))


# (names, defaults) of each reduction's torch functions: torch.sum(input, dim, keepdim, dtype),
# torch.mean the same, torch.amax(input, dim=(), keepdim) (no dim: every dim).
_SIGNATURE = (("input", "dim", "keepdim", "dtype"), (REQUIRED, None, False, None))
_AMAX_SIGNATURE = (("input", "dim", "keepdim"), (REQUIRED, (), False))
SIGNATURES: dict[str, dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]]] = {
    "sum": {torch.sum: _SIGNATURE, torch.Tensor.sum: _SIGNATURE},
    "mean": {torch.mean: _SIGNATURE, torch.Tensor.mean: _SIGNATURE},
    "amax": {torch.amax: _AMAX_SIGNATURE, torch.Tensor.amax: _AMAX_SIGNATURE},
}


def _reduction_planner(reduction: str) -> Any:
    """The call planner of one reduction's torch functions (a role's route)."""
    signatures = SIGNATURES[reduction]
    trailing = () if reduction == "sum" else (reduction,)

    def plan(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
             kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
        names, defaults = signatures[func]
        bound = bind_arguments(args, kwargs, names, defaults)
        found = input_over_one_dim(kernel, bound)
        if isinstance(found, str):
            return found
        x, axis = found
        assert bound is not None  # found: the call fits the signature
        if bound.get("dtype") not in (None, x.dtype) or not x.is_floating_point():
            return "dtype"
        if x.numel() < kernel.limits.get("min_elements", 1) or \
                x.shape[axis] < kernel.limits.get("min_row", 1):
            return "smaller than a reduce target"
        why = call_refusal(kernel, x)
        if why:
            return why
        call = over_axis_caller(kernel, x, axis, *trailing)
        get_x = argument_getter(names, args, "input")
        keepdim, kept = bound["keepdim"], x.shape[:axis] + x.shape[axis + 1:]
        shape = (*kept[:axis], 1, *kept[axis:]) if keepdim else tuple(kept)
        # The kernel's output over the last dim of a 2-D x already is the reduction's.
        reshaped = keepdim or not (x.ndim == 2 and axis == 1)
        if not reshaped:
            return argument_runner(call, names, args, ("input",))

        def run(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
            out, why = call(get_x(args, kwargs))
            if why:
                return None, why
            return (out.reshape(shape) if reshaped else out), None

        return run

    return plan


_amax_call = run_planner(_reduction_planner("amax"))
# torch.max(input, dim, keepdim=False) -> (values, indices), as torch.Tensor.max(dim, keepdim).
_MAX_SIGNATURE = (("input", "dim", "keepdim"), (REQUIRED, REQUIRED, False))
MAX_FUNCTIONS = (torch.max, torch.Tensor.max)
# Where the caller of a torch.max reads only its values: (code, offset of the call) → bool.
_VALUES_ONLY: dict[tuple[CodeType, int], bool] = {}
_INSTRUCTIONS: dict[CodeType, list[dis.Instruction]] = {}


def _caller(start: FrameType | None) -> FrameType | None:
    """The frame that called the torch function, above the torch-function modes handling it
    (the Router's, and any mode under it); None when torch's own code called it (its use of
    the result is not the model's to prove)."""
    frame = start
    while frame is not None and frame.f_code.co_name == "__torch_function__":
        frame = frame.f_back
    if frame is None or frame.f_globals.get("__name__", "").split(".")[0] == "torch":
        return None
    return frame


def _reads_only_values(code: CodeType, offset: int) -> bool:
    """Does the code, right after the call at `offset`, keep the values of the (values, indices)
    it returns and drop the indices: `[0]`, `.values`, or `v, i = ...` with `i` never read?"""
    if code not in _INSTRUCTIONS:
        _INSTRUCTIONS[code] = list(dis.get_instructions(code))
    instructions = _INSTRUCTIONS[code]
    at = next((i for i, ins in enumerate(instructions) if ins.offset == offset), None)
    if at is None:
        return False
    following = instructions[at + 1:at + 4]
    if not following:
        return False
    first = following[0]
    if first.opname == "LOAD_ATTR" and first.argval == "values":
        return True
    if first.opname in ("LOAD_CONST", "LOAD_SMALL_INT") and type(first.argval) is int and \
            first.argval == 0 and len(following) > 1:
        second = following[1]
        return second.opname == "BINARY_SUBSCR" or (second.opname == "BINARY_OP" and
                                                     second.argrepr.endswith("[]"))
    if first.opname == "UNPACK_SEQUENCE" and first.argval == 2:
        stores = following[1:]
        if stores and stores[0].opname == "STORE_FAST_STORE_FAST":
            names = tuple(stores[0].argval)
        elif len(stores) == 2 and all(s.opname == "STORE_FAST" for s in stores):
            names = (stores[0].argval, stores[1].argval)
        else:
            return False
        indices = names[-1]
        if indices in code.co_cellvars:  # a closure may read it
            return False
        return not any(ins.opname.startswith("LOAD_FAST") and
                       (ins.argval == indices or (isinstance(ins.argval, tuple) and
                                                  indices in ins.argval))
                       for ins in instructions)
    return False


def _indices_unused() -> bool:
    """Whether the model's code that called torch.max provably drops the indices (see
    `_reads_only_values`); read from the caller's bytecode at the call, once per call site."""
    frame = _caller(sys._getframe(2))
    if frame is None:
        return False
    key = (frame.f_code, frame.f_lasti)
    if key not in _VALUES_ONLY:
        _VALUES_ONLY[key] = _reads_only_values(*key)
    return _VALUES_ONLY[key]


def _max_values_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                     kwargs: Mapping[str, Any], stats: RouteStats) -> Outcome:
    """torch.max(x, dim)'s values from the amax kernel, where the caller drops the indices: a
    kernel computes the values alone, so it takes the call only when the result the caller
    reads is exactly what it returns. The result is torch.max's (values, indices) named tuple
    with None for the indices nothing reads. (Its gradient is amax's: shared among tied
    maxima where torch.max gives it to one.)"""
    bound = bind_arguments(args, kwargs, *_MAX_SIGNATURE)
    if bound is None or not isinstance(bound["dim"], int) or isinstance(bound["dim"], bool):
        return None, NOT_MINE  # torch.max(x), or the elementwise torch.max(x, other)
    if torch.compiler.is_compiling():
        return None, call_refusal(kernel, bound["input"]) or "torch.max under torch.compile"
    if not _indices_unused():
        return None, "torch.max(x, dim): its indices may be read"
    values, why = _amax_call(kernel, torch.amax, (bound["input"], bound["dim"], bound["keepdim"]),
                             {}, stats)
    if why is not None:
        return None, why
    return torch.return_types.max((values, None)), None


INTEGRATION = Integration(
    schema="(Tensor x, int axis=-1, str op='sum') -> Tensor",
    fake=_fake_reduce,
    backward="analytic",
    gradient=_reduce_gradient,
    # One role per reduction ("" is the sum's): a kernel takes only its own op's calls; the
    # amax kernel also takes torch.max(x, dim) where its indices go unused.
    call_routes={("" if r == "sum" else r): (CallRoute(tuple(SIGNATURES[r]),
                                                       plan=_reduction_planner(r)),
                                             *((CallRoute(MAX_FUNCTIONS, _max_values_call),)
                                               if r == "amax" else ()))
                 for r in OPS},
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype),),
)
