"""What every route to a kernel shares: the kernels and the counters.

`RoutedKernel` is one finished kernel and what it may be used for (a manifest entry: dtypes the
harness verified, parameters, profiled call sites, tolerances); `RouteStats`/`PatchReport` count
the calls each route sent to its kernel and those it left to PyTorch, with the reasons. The
public helpers that decide whether one call may go to a kernel, call it, bind a torch function's
arguments and judge a probe are in `route_helpers.py`; a route's decision kept per call
signature (its plan) in `plans.py`; verify's replay of routed calls in `call_recording.py`.

The routes themselves live in each op entry's integration section (`autokernel/ops/<type>.py`,
which modules and torch calls go to its kernel), applied by `patch.py`; `function_routes.py` (a
model's own functions, such as a rope(x, cos, sin)) and `attention_chain.py` (explicit
softmax(q·kᵀ)·v) are the two routes that need machinery of their own. This file imports only
torch (and custom_ops), because `autokernel export` inlines it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from autokernel.integrate.custom_ops import (  # `autokernel export` inlines that module
    BACKWARD_DESCRIPTION,
    KernelOp,
)
from autokernel.integrate.integration import Integration
from autokernel.text import count_of, scope_name  # inlined first by `autokernel export`

DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
}
PROBE_SEED = 1234

Outcome = tuple[Any, str | None]  # (output, None) when routed, (None, why not) otherwise


@dataclass
class RoutedKernel:
    """A registered kernel and what it may be used for (one entry of a run's manifest)."""

    tag: str  # "01_rmsnorm"
    kernel_type: str
    op: KernelOp
    reference: Callable[..., torch.Tensor] | None  # the op's oracle, for probes
    dtypes: frozenset[torch.dtype]  # dtypes the harness verified
    params: dict[str, Any] = field(default_factory=dict)  # e.g. {"causal": True}
    sites: tuple[str, ...] = ()  # module paths of the profiled calls
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)  # e.g. reduce's minimum sizes
    # matmul's "linear" (nn.Linear modules), "batched" or "gemm" (torch.matmul & co.); "" for
    # the other kernel types, and for a matmul of a run made before roles (routed as "linear").
    role: str = ""
    shape: tuple[int, ...] = ()  # the profiled shape it was benchmarked at, in the op's dims
    # Under torch.compile: False (the default of `patch_model`) leaves the call to the code it
    # replaced, so Inductor compiles and fuses the stock ops; True puts the custom op in the
    # graph (on the H100 that lost: its dispatch costs ~140 µs of host time per call in
    # Inductor's code, and the op cannot be fused with its neighbours).
    in_compiled_graphs: bool = False

    def __deepcopy__(self, memo: dict[int, Any]) -> RoutedKernel:
        return self  # immutable in use; a copied model shares the registered op

    @classmethod
    def from_manifest(cls, entry: Mapping[str, Any], op: KernelOp,
                      reference: Callable[..., torch.Tensor] | None) -> RoutedKernel:
        return cls(
            tag=entry["tag"],
            kernel_type=entry["kernel_type"],
            op=op,
            reference=reference,
            dtypes=frozenset(DTYPES[d] for d in entry["dtypes"]),
            params=dict(entry.get("params", {})),
            sites=tuple(entry.get("sites", ())),
            tolerances={DTYPES[d]: (float(a), float(r))
                        for d, (a, r) in entry.get("tolerances", {}).items()},
            limits=dict(entry.get("limits", {})),
            role=str(entry.get("role", "")),
            shape=tuple(int(d) for d in entry.get("shape", ())),
        )

    @property
    def integration(self) -> Integration:
        """The op entry's schema, backward and routes (`autokernel/ops/<type>.py`)."""
        if self.op.integration is None:
            raise ValueError(f"{self.tag}: registered without its op entry's integration")
        return self.op.integration

    @property
    def label(self) -> str:
        return f"{self.kernel_type} ({self.role})" if self.role else self.kernel_type


@dataclass
class RouteStats:
    """What one kernel got: the modules routed or skipped, and the calls routed or not."""

    tag: str
    kernel_type: str
    backward: str
    functional: bool = False  # routes torch calls (in scopes), not modules
    modules: list[str] = field(default_factory=list)  # module paths routed ("" = the model)
    scopes: list[str] = field(default_factory=list)  # where functional calls are intercepted
    functions: list[str] = field(default_factory=list)  # the model's own functions, "rope()"
    skipped: dict[str, str] = field(default_factory=dict)  # module path -> why it is not routed
    calls: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)  # reason -> calls left to PyTorch
    # "compile-transparent (triton_op)" or "opaque to torch.compile (custom_op: why)"
    compile_path: str = ""
    in_compiled_graphs: bool = False  # goes into compiled graphs (else left to Inductor)
    # A fused add + norm kernel: the widths of the norm modules it taps (adds of another last
    # dim are never deferred, `residual_norm.defer_add`).
    fused_widths: set[int] = field(default_factory=set)

    def count_call(self) -> None:
        if not torch.compiler.is_compiling():
            self.calls += 1

    def count_fallback(self, reason: str) -> None:
        if not torch.compiler.is_compiling():
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def reset_counts(self) -> None:
        self.calls = 0
        self.fallbacks.clear()

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag, "kernel_type": self.kernel_type, "backward": self.backward,
            "backward_description": BACKWARD_DESCRIPTION[self.backward],
            "modules": list(self.modules), "scopes": list(self.scopes),
            "functions": list(self.functions),
            "skipped": dict(self.skipped), "calls": self.calls,
            "fallbacks": dict(self.fallbacks), "compile_path": self.compile_path,
            "in_compiled_graphs": self.in_compiled_graphs,
        }

    def summary(self) -> str:
        parts = []
        if self.modules or not (self.functional or self.functions):
            parts.append(count_of(len(self.modules), "module"))
        if self.functions:
            parts.append(", ".join(self.functions))
        if self.functional:
            parts.append("calls in " + (", ".join(scope_name(p) for p in self.scopes)
                                        or "nothing"))
        where = " and ".join(parts)
        text = f"{self.tag}: {where}, {count_of(self.calls, 'call')} routed"
        if self.fallbacks:
            left = sum(self.fallbacks.values())
            reasons = "; ".join(f"{r} ×{n}" for r, n in sorted(self.fallbacks.items()))
            text += f", {left} left to PyTorch ({reasons})"
        text += f"; {BACKWARD_DESCRIPTION[self.backward]}"
        if self.compile_path:
            graphs = "in compiled graphs" if self.in_compiled_graphs else \
                "left to Inductor under torch.compile"
            text += f"; {self.compile_path}, {graphs}"
        return text


@dataclass
class PatchReport:
    kernels: dict[str, RouteStats]
    # Kernels of the run not routed at all in this mode, and why (verify's in-context selection
    # left them out): tag -> reason.
    left_out: dict[str, str] = field(default_factory=dict)

    def reset_counts(self) -> None:
        for stats in self.kernels.values():
            stats.reset_counts()

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.kernels.values())

    def to_dict(self) -> dict[str, Any]:
        return {tag: stats.to_dict() for tag, stats in self.kernels.items()}

    def lines(self) -> list[str]:
        return [stats.summary() for stats in self.kernels.values()] + [
            f"{tag}: not routed: {why}" for tag, why in self.left_out.items()]
