"""Which kernel type each unit of measured time belongs to, and at what shape.

Classification goes by op and module structure; kernel names are a last resort for kernels the
profiler could not tie to an op. When the profile recorded the forward's data-flow graph
(`recorder.py`), step 1 is the graph patterns instead (`OpSpec.graph_patterns`, run in
`patterns.GRAPH_PATTERN_ORDER`: ops recognized by what they compute, `graph_match.py`), then the
pieces of ops no pattern recognized are labeled "other" (`graph_fragments.py`). In order:

1. Patterns that span several ops claim them as ONE call of one kernel type (each op entry's
   `OpSpec.patterns`, run in `patterns.PATTERN_ORDER`):
   - a hand-written RMSNorm module (a 1-D weight, no bias, only pow/mean/add/rsqrt/mul and casts
     inside, no mean subtraction) → rmsnorm;
   - a SwiGLU MLP: linear, linear, silu, mul, linear in a row with gate/up [H, D], down [D, H]
     and no biases (silu(gate(x)) * up(x) → down) → fused_mlp. Anything less (a GELU MLP, a
     biased projection) stays matmul + other;
   - explicit attention, matmul(Q, Kᵀ) → [scale] → [masked_fill/where, [S, S] mask] → softmax →
     matmul(P, V) → flash_attention. With an additive or per-batch mask the pattern is not
     reliable, so its softmax stays a softmax target and its matmuls matmul;
   - rotate-half RoPE (neg → cat between the two muls and the add), and every op inside a module
     whose class is a rotary embedding → rotary_embedding;
   - log_softmax followed by nll_loss → cross_entropy.
2. Otherwise the outermost op in the launch stack that is one of the kernel types' aten ops
   (each op entry's `OpSpec.aten_ops`, gathered by `op_rules.op_rules`):
   aten::linear/addmm/mm/bmm/matmul → matmul (in one of three roles, below), SDPA and its
   backends → flash_attention, aten::rms_norm/_fused_rms_norm → rmsnorm, aten::layer_norm →
   layernorm, ...
   Outermost, because the inner ops are an implementation detail: F.rms_norm on CUDA runs
   `vectorized_layer_norm_kernel`, which name-based rules call layernorm.
3. A kernel with no op: cuBLAS/CUTLASS GEMM names (nvjet_*, *gemm*) → matmul, flash/fmha/sdpa →
   flash_attention.
4. Everything else is "other", and stays in the denominator.

Shapes are reported in each kernel type's registry dims (e.g. matmul (B, M, N, K) = (1, M, N, K)
from a linear's input [..., K] and weight [N, K]).

Matmuls are split by role, each role a target of its own with its own shapes, because the shapes
differ by orders of magnitude and so does what a kernel for them must do well:
- "linear": linear layers, aten::linear (nn.Linear, F.linear);
- "batched": batched products, aten::bmm/baddbmm and aten::matmul whose B has batch dims
  (attention's Q @ Kᵀ and P @ V when no attention pattern claimed them), B = the batch;
- "gemm": every other GEMM: x @ W, addmm/mm called directly (HF's Conv1D), mv.
A GEMM kernel the profiler could not tie to an op has no known role; the ranking adds it to the
largest matmul target. When the second operand reaches the op as the transposed view of a
contiguous tensor (Q @ K.transpose(-2, -1), x @ W.t()), the site's `b_transposed` parameter says
so and the harness times that layout.
"""

from __future__ import annotations

from autokernel.profiling.callsites import (  # noqa: F401 - the classifier's API
    MATMUL_ROLES,
    OTHER,
    input_parameters,
    registry_dims,
    to_registry_shape,
    Attribution,
    Context,
    SiteKey,
)
from autokernel.profiling.site_readers import call_dtype
from autokernel.profiling.events import OpCall, RecordedProfile, collection_paused
from autokernel.profiling.op_rules import (  # noqa: F401 - the classifier's API
    OpRule, classify_kernel_name, op_rules,
)
from autokernel.profiling.graph_fragments import label_fragments
from autokernel.profiling.graph_match import GraphContext
from autokernel.profiling.patterns import graph_patterns, patterns


# ---------------------------------------------------------------------------------------------
# Classifying every row


Found = tuple[str, OpCall, SiteKey]


def _classify_op(ctx: Context, op: OpCall, is_root: bool) -> Found | None:
    """The kernel type, op and site of one op's own rule, or None."""
    rule = op_rules().get(op.name)
    if rule is None or (rule.root_only and not is_root):
        return None
    extracted = rule.extract(op, ctx)
    if extracted is None:
        if rule.root_only:
            return None  # e.g. a small sum: not a target
        named, params = None, {}
    else:
        named, params = extracted
    role = rule.role(op, ctx) if rule.role is not None else ""
    site = ctx.site(rule.kernel_type, ctx.module_path(op), op.name, named, params,
                    call_dtype(op, ctx.record.dtype), role)
    return rule.kernel_type, op, site


def _classify_by_op(ctx: Context, op_id: int, found: dict[int, Found | None]) -> Found | None:
    """The outermost op in the launch stack of `op_id` that a kernel type's rule takes.

    `found` remembers each op's answer: an op's is its parent's when that one has one (the
    outermost wins), else its own rule's. A recurrent forward's 100k ops then cost one rule
    lookup each, not one per op above them.
    """
    ops = ctx.record.ops
    chain = []
    current: int | None = op_id
    while current is not None and current in ops and current not in found:
        chain.append(current)
        current = ops[current].parent
    answer = found.get(current) if current is not None else None
    for op_id in reversed(chain):  # outermost first
        if answer is None:
            op = ops[op_id]
            answer = _classify_op(ctx, op, op.parent is None or op.parent not in ops)
        found[op_id] = answer
    return answer


def classify_profile(record: RecordedProfile) -> list[Attribution]:
    """Classify every timed row of the profile; their times add up to the profile's total."""
    with collection_paused():
        return _classify(record)


def _classify(record: RecordedProfile) -> list[Attribution]:
    ctx = Context.build(record)
    if record.graph is not None and record.graph.nodes:
        gctx = GraphContext.build(record.graph, ctx)
        for find in graph_patterns():
            find(gctx)
        label_fragments(gctx)
    else:
        for find in patterns():
            find(ctx)

    memo: dict[int, tuple[str, tuple[str, int], SiteKey | None, str]] = {}
    found: dict[int, Found | None] = {}
    attributions: list[Attribution] = []
    for index, row in enumerate(record.rows):
        if row.op is None or row.op not in record.ops:
            kernel_type = classify_kernel_name(row.name)
            if kernel_type is None:
                attributions.append(Attribution(OTHER, row.time_us, ("kernel", index), None,
                                                row.name))
            else:
                # Role unknown (""): the ranking puts it with its kernel type's largest target.
                site = SiteKey("", "(no op recorded)", (), record.dtype,
                               notes=(("kernel", row.name),))
                attributions.append(Attribution(kernel_type, row.time_us, ("kernel", index),
                                                site, row.name))
            continue
        if row.op not in memo:
            root = ctx.root_of.get(row.op, row.op)
            if root in ctx.claims:
                claim = ctx.claims[root]
                memo[row.op] = (claim.kernel_type, claim.call, claim.site,
                                claim.label if claim.site is None else claim.site.aten_op)
            else:
                taken = _classify_by_op(ctx, row.op, found)
                if taken is not None:
                    kernel_type, op, site = taken
                    memo[row.op] = (kernel_type, ("op", op.id), site, op.name)
                else:
                    memo[row.op] = (OTHER, ("op", root), None, record.ops[root].name)
        kernel_type, call, site, label = memo[row.op]
        attributions.append(Attribution(kernel_type, row.time_us, call, site, label))
    return attributions
