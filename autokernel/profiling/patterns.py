"""Patterns that span several ops and claim them as ONE call of one kernel type (see
`classify.py`'s docstring for the list). Each pattern lives in its kernel type's op entry
(`OpSpec.patterns`); this module says in which order the types' patterns run.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from autokernel.profiling.callsites import Context
from autokernel.profiling.graph_match import GraphContext

# A pattern claims the ops it matches and later patterns skip claimed ops, so where two could
# match the same ops the earlier one wins. Every pattern runs before any single-op rule
# (classify.py): that is why a SwiGLU's three linears are one fused_mlp call, not three matmuls,
# and why explicit attention's matmuls and softmax are flash_attention. Among the patterns:
PATTERN_ORDER: tuple[str, ...] = (
    # Takes a hand-written RMSNorm module only while none of its ops is claimed: first, so that
    # no other pattern can split one.
    "rmsnorm",
    # A residual add and the norm it feeds, as one call: after "rmsnorm", whose claim of a
    # hand-written RMSNorm module it extends to the add before it (`residual_add.py`). The two
    # take different norms' ops (aten::rms_norm, aten::layer_norm), so their order is a tie-break.
    "add_rmsnorm",
    "add_layernorm",
    # SwiGLU (linear, silu, mul) and explicit attention (matmul, softmax, matmul) anchor on ops
    # no other pattern takes; between these two the order is a tie-break.
    "fused_mlp",
    "flash_attention",
    # Its module rule claims every op still unclaimed inside a rotary-named module, so it runs
    # after the specific patterns above rather than taking their ops.
    "rotary_embedding",
    # An LM head's linear and the loss of its output: before "cross_entropy", whose
    # log_softmax + nll_loss it takes whole when a head feeds it (`lm_head_loss.py`).
    "linear_cross_entropy",
    # log_softmax + nll_loss, which no other pattern takes; last, as it has always run.
    "cross_entropy",
)
# The recorded profiles in tests/test_profiler.py pin what this order produces.

# The same for the graph patterns (`OpSpec.graph_patterns`), which match by data flow: a pattern
# that takes a whole larger op runs before the patterns of the ops inside it.
GRAPH_PATTERN_ORDER: tuple[str, ...] = (
    # An LM head and its loss: before the loss alone and before any matmul.
    "linear_cross_entropy",
    # Attention takes its softmax, its products, its mask's side branch and GQA repeats.
    "flash_attention",
    # The gated MLP takes its activation (a SiLU or GELU written out) and its three linears.
    "fused_mlp",
    # A residual add + norm before the norm alone; a LayerNorm before an RMSNorm, since a
    # LayerNorm written out holds an RMS of its centered input.
    "add_layernorm",
    "add_rmsnorm",
    "layernorm",
    "rmsnorm",
    "rotary_embedding",
    "cross_entropy",
    # The pointwise and reduction ops that larger ops are made of come last, so that they only
    # take what no larger op holds.
    "softmax",
    "gelu",
    "reduce",
)


@lru_cache(maxsize=None)
def patterns() -> tuple[Callable[[Context], None], ...]:
    """Every op entry's `OpSpec.patterns`, type by type in PATTERN_ORDER (each type's own
    patterns in the order its entry lists them)."""
    from autokernel.ops import all_specs

    specs = all_specs()
    unordered = [name for name, spec in specs.items()
                 if spec.patterns and name not in PATTERN_ORDER]
    if unordered:
        # Running them last by default would make the order depend on registry order.
        raise ValueError(f"kernel types {unordered} declare patterns but are not in "
                         "autokernel/profiling/patterns.PATTERN_ORDER: add them where they "
                         "should run")
    return tuple(find for name in PATTERN_ORDER for find in specs[name].patterns)


@lru_cache(maxsize=None)
def graph_patterns() -> tuple[Callable[[GraphContext], None], ...]:
    """Every op entry's `OpSpec.graph_patterns`, type by type in GRAPH_PATTERN_ORDER."""
    from autokernel.ops import all_specs

    specs = all_specs()
    unordered = [name for name, spec in specs.items()
                 if spec.graph_patterns and name not in GRAPH_PATTERN_ORDER]
    if unordered:
        raise ValueError(f"kernel types {unordered} declare graph patterns but are not in "
                         "autokernel/profiling/patterns.GRAPH_PATTERN_ORDER")
    return tuple(find for name in GRAPH_PATTERN_ORDER for find in specs[name].graph_patterns)
