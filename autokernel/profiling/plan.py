"""The profiler's output, and the loop's input: a ranked plan of kernel targets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Below this fraction of the time left over, the rest is rounding in a sum of shares, not time:
# a ceiling of 1 / 1e-16 = 9007199254740992x is "no limit" said badly.
NEGLIGIBLE_SHARE = 1e-9

# What ranks a plan's targets, for the delivery mode: "eager" (the model as written) or "compile"
# (the model under torch.compile, when the compiled model was profiled).
RANK_BY = ("eager", "compile")


def amdahl_speedup(share: float, kernel_speedup: float = 2.0) -> float:
    """End-to-end speedup when work that takes `share` of the time gets `kernel_speedup`x faster.

    inf when nothing is left: all of the time sped up infinitely (the ceiling with no "other").
    """
    share = min(max(share, 0.0), 1.0)
    remaining = (1.0 - share) + (share / kernel_speedup if kernel_speedup != float("inf") else 0.0)
    return 1.0 / remaining if remaining > NEGLIGIBLE_SHARE else float("inf")


def format_speedup(speedup: float | None, digits: int = 2) -> str:
    """"1.50×", and "∞" for an unbounded one (None or inf: no time left outside the targets)."""
    if speedup is None or speedup == float("inf"):
        return "∞"
    return f"{speedup:.{digits}f}×"


@dataclass
class CallSite:
    """One place in the model that launches work of a target's kernel type."""

    module: str  # qualified nn.Module path, e.g. "layers.3.attn"
    aten_op: str  # e.g. "aten::_fused_rms_norm"
    shape: list[int]  # in the op's registry dims (OpSpec.dims)
    dtype: str  # "fp16" | "bf16" | "fp32"
    calls: int
    time_ms: float  # device time per profiled forward
    params: dict[str, Any] = field(default_factory=dict)  # e.g. {"eps": 1e-5, "causal": True}
    # What the op's input generator does not take but a person should know: {"bias": True}.
    notes: dict[str, Any] = field(default_factory=dict)
    # How `autokernel verify` would splice a kernel in here (autokernel.profiling.routable):
    # "module", "call", "call chain", "function?" or "no: why"; "" in plans made before.
    route: str = ""


@dataclass
class Target:
    rank: int
    kernel_type: str  # one registry entry (autokernel.ops); several targets may share it
    shapes: list[list[int]]  # distinct registry-dims shapes, most time first
    dtype: str
    calls: int
    time_ms: float  # device time per forward
    share: float  # fraction of the model's device time, 0..1
    bench_shape: list[int]  # the shape the harness should benchmark (most time)
    amdahl_2x: float  # end-to-end speedup if this kernel alone got 2x faster
    cumulative_2x: float  # the same with this and every higher-ranked target 2x faster
    call_sites: list[CallSite] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)  # reference arguments at bench_shape
    dims: list[str] = field(default_factory=list)  # names of the shape dims (OpSpec.dims)
    # End-to-end ceiling if this and every higher-ranked target took no time; None: unbounded.
    cumulative_limit: float | None = None
    # What the calls are, for kernel types whose calls differ in kind: matmul's "linear",
    # "batched" or "gemm" (autokernel.profiling.classify.MATMUL_ROLES); "" for the others.
    role: str = ""
    # Its call sites' routes in one cell: "module", "call", "part: call; no: why", "no: why".
    route: str = ""
    # Under torch.compile (`compiled.py`): the share of the compiled forward's time its ops still
    # take, and that time per forward; None when the compiled model was not profiled.
    compile_share: float | None = None
    compile_ms: float | None = None

    @property
    def label(self) -> str:
        """"matmul (batched)": the kernel type, and the role when it has one."""
        return f"{self.kernel_type} ({self.role})" if self.role else self.kernel_type


@dataclass
class Plan:
    model: str
    class_name: str
    device: str
    dtype: str
    gpu: str | None
    total_ms: float  # device time per forward, counted once
    targets: list[Target]
    other_ms: float = 0.0
    other_share: float = 0.0
    other_ops: list[dict[str, Any]] = field(default_factory=list)  # top "other" rows, for people
    iterations: int = 0
    message: str = ""  # e.g. "no optimizable kernel found"
    time_source: str = ""  # "device kernels" (GPU) or "cpu op self time"
    warmup: int = 0
    versions: dict[str, str] = field(default_factory=dict)  # python, torch, triton, cuda
    # What ranks the targets (RANK_BY): their share of the eager forward, or of the compiled one.
    rank_by: str = "eager"
    # The compiled forward's measured time and what of it is no target's; None: not profiled.
    compile_ms: float | None = None
    compile_other_share: float | None = None
    # What a reader should know of how the plan was made: a compile that failed, graph breaks,
    # a splice check that could not run.
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        targets = []
        for t in data.get("targets", []):
            t = dict(t)
            t["call_sites"] = [CallSite(**c) for c in t.get("call_sites", [])]
            targets.append(Target(**t))
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["targets"] = targets
        return cls(**fields)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_dict(json.loads(Path(path).read_text()))
