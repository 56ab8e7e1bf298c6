"""One aten op, one call of a kernel type: every op entry's `OpSpec.aten_ops`, gathered into one
table (`op_rules`), and the kernel-name rule for kernels the profiler tied to no op.

Each kernel type's extractors live in its op entry (`autokernel/ops/<type>.py`); what stays here
is what no single type owns: the table that checks no aten op is claimed twice, and
`classify_kernel_name`, which decides between two types.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from autokernel.profiling.callsites import Context, Extractor
from autokernel.profiling.events import OpCall

# Kept here, not in the matmul and flash_attention entries: the order of the checks is the rule
# (a name that says both attention and GEMM is attention; an implicit-GEMM convolution is
# neither), so it must read as one function over both types.
ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention", re.IGNORECASE)
GEMM_KERNEL = re.compile(r"^nvjet_|gemm|cutlass|xmma|cublas", re.IGNORECASE)
CONV_KERNEL = re.compile(r"conv|fprop|dgrad|wgrad|implicit", re.IGNORECASE)


@dataclass(frozen=True)
class OpRule:
    kernel_type: str
    extract: Extractor
    root_only: bool = False  # e.g. the sum inside aten::mean is not a sum the model asked for
    role: Callable[[OpCall, Context], str] | None = None  # kernel types with several roles


@lru_cache(maxsize=None)
def op_rules() -> dict[str, OpRule]:
    """aten op name → the rule of the one kernel type that declares it (`OpSpec.aten_ops`)."""
    from autokernel.ops import all_specs

    rules: dict[str, OpRule] = {}
    for spec in all_specs().values():
        for name, rule in spec.aten_ops.items():
            if name in rules:
                # Which type would win would depend on registry order: refuse instead.
                raise ValueError(f"{name} is declared by both {rules[name].kernel_type} and "
                                 f"{spec.name}; an aten op belongs to one kernel type")
            rules[name] = OpRule(spec.name, rule.extract, rule.root_only, rule.role)
    return rules


def classify_kernel_name(name: str) -> str | None:
    """The kernel type a device kernel's name alone implies, for kernels with no op."""
    if ATTENTION_KERNEL.search(name):
        return "flash_attention"
    if GEMM_KERNEL.search(name) and not CONV_KERNEL.search(name):
        return "matmul"
    return None
