"""What a profiled forward leaves behind, in a plain form the classifier reads: `RecordedProfile`.

Collecting (torch.profiler, in `profiler.py`) and classifying (`classify.py`) meet here, so that the
classifier can be tested from recorded rows, without a GPU: a JSON file of the same shape, e.g. one
captured on an H100 with `autokernel profile --events FILE`, is a test fixture.

The model of a profile:
- `OpCall`: one call of an aten op (or any dispatcher op), with its input shapes, dtypes and scalar
  arguments as the profiler recorded them, the op call that encloses it (`parent`) and the
  `nn.Module` calls it ran inside (`scopes`, outermost first).
- `ModuleCall`: one call of a submodule's forward (`path` is its qualified name, "" for the model).
- `ModuleInfo`: what the classifier needs to know about a module: its class, its own parameters'
  shapes and scalar attributes such as `eps`.
- `Graph`: the forward's data flow, call by call (`graph.py`); an `OpCall.node` names the call
  whose profiler range the op ran in.
- `TimedRow`: one unit of measured time, counted exactly once: a device kernel (or memcpy/memset) on
  a GPU, the self time of one op call on the CPU. `op` is the op call that launched it, the
  innermost one; None when the profiler could not tell.

Everything here is plain Python (no torch import), so it loads fast and round-trips through JSON.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel.profiling.graph import Graph

# Inductor's kernels: graph_0_cpp_fused_add_mean_1, cpp_fused__softmax_0 (a CPU profile's
# ranges), triton_per_fused_native_layer_norm_2, triton_tem_fused_addmm_0; the ops between
# "fused_" and the kernel's number.
FUSED_KERNEL = re.compile(r"^(?:graph_\d+_)?(?:cpp|triton_[a-z]+)_fused_(?P<ops>.+?)(?:_\d+)?$")


def is_op_name(name: str) -> bool:
    """An op's profiler range (namespaced, `aten::mm`) or an Inductor kernel's; any other name
    is a range around ops (a custom autograd.Function's forward, a TorchScript function)."""
    return "::" in name or FUSED_KERNEL.match(name) is not None



@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block. Reading or classifying a forward of
    100k ops makes several objects per op, and each gen-2 collection meanwhile walks all of them
    (half the time of a read); none of them forms a cycle."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@dataclass
class OpCall:
    id: int  # unique, increasing in start-time order
    name: str  # "aten::linear"
    parent: int | None = None  # the enclosing op call, None for an op the Python code called
    scopes: list[int] = field(default_factory=list)  # ModuleCall ids, outermost first
    shapes: list[list[int]] = field(default_factory=list)  # one per input; [] for non-tensors
    dtypes: list[str] = field(default_factory=list)  # as the profiler spells them: "c10::Half"
    args: list[Any] = field(default_factory=list)  # scalar / scalar-list inputs, None elsewhere
    node: int | None = None  # the model's torch call (graph node index) it ran in, if recorded


@dataclass
class ModuleCall:
    id: int
    path: str  # qualified submodule name, "" for the model itself


@dataclass
class ModuleInfo:
    type: str  # "torch.nn.modules.normalization.RMSNorm"
    params: dict[str, list[int]] = field(default_factory=dict)  # own parameters, not children's
    attrs: dict[str, Any] = field(default_factory=dict)  # scalar attributes: eps, causal, ...

    @property
    def class_name(self) -> str:
        return self.type.rsplit(".", 1)[-1]


@dataclass
class TimedRow:
    name: str  # kernel name on a GPU, op name on the CPU
    time_us: float  # summed over all profiled iterations
    op: int | None = None  # the launching OpCall's id


@dataclass
class RecordedProfile:
    device: str  # "cuda" | "cpu"
    dtype: str  # the dtype the model was cast to: "fp16" | "bf16" | "fp32"
    iterations: int  # profiled forwards; times and counts are divided by it
    rows: list[TimedRow]
    ops: dict[int, OpCall]
    module_calls: dict[int, ModuleCall] = field(default_factory=dict)
    modules: dict[str, ModuleInfo] = field(default_factory=dict)
    gpu: str | None = None
    time_source: str = ""  # what a row's time is: "device kernels" or "cpu op self time"
    versions: dict[str, str] = field(default_factory=dict)
    # The first profiled forward's data-flow graph (`graph.py`); None when it was not recorded
    # (an older recording, or a model the recorder could not follow).
    graph: Graph | None = None
    warmup: int | None = None  # forwards run before profiling; None in older recordings

    @property
    def total_us(self) -> float:
        return sum(row.time_us for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ops"] = [asdict(op) for op in self.ops.values()]
        data["module_calls"] = [asdict(call) for call in self.module_calls.values()]
        data["graph"] = self.graph.to_dict() if self.graph is not None else None
        return data

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()) + "\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordedProfile:
        ops = [OpCall(**op) for op in data.get("ops", [])]
        calls = [ModuleCall(**call) for call in data.get("module_calls", [])]
        return cls(
            device=data["device"],
            dtype=data.get("dtype", "fp32"),
            iterations=int(data.get("iterations", 1)),
            rows=[TimedRow(**row) for row in data.get("rows", [])],
            ops={op.id: op for op in ops},
            module_calls={call.id: call for call in calls},
            modules={k: ModuleInfo(**v) for k, v in data.get("modules", {}).items()},
            gpu=data.get("gpu"),
            time_source=data.get("time_source", ""),
            versions=dict(data.get("versions", {})),
            graph=Graph.from_dict(data["graph"]) if data.get("graph") else None,
            warmup=data.get("warmup"),
        )

    @classmethod
    def load(cls, path: str | Path) -> RecordedProfile:
        return cls.from_dict(json.loads(Path(path).read_text()))
