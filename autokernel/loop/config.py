"""How the loop behaves: `LoopConfig`, saved in run.json so that resume reuses it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autokernel.orchestrate import MoveOnConfig

from autokernel.device import CPU_TIMING_NOTE

CPU_LOOP_NOTE = f"{CPU_TIMING_NOTE} (the keep rule still compares them; the %-of-peak rule is off)"


@dataclass
class LoopConfig:
    """Everything that decides how the loop behaves; saved in run.json so resume reuses it."""

    device: str
    dtype: str
    agent: str  # the resolved agent name
    hours: float | None = 8.0
    move_on: MoveOnConfig = field(default_factory=MoveOnConfig)
    min_keep_margin: float = 0.01  # keep when the paired speedup's 95% lower bound > 1 + this
    bench_timeout_s: float = 120.0
    max_shapes: int = 2  # profiled shapes timed per experiment (most time first); every profiled
    # shape is checked for correctness
    harness_quick: bool = False  # the harness's smaller shape sweep (the cpu default: CI time)
    screen: bool = True  # quick sweep first; the full sweep only for a candidate about to be kept
    timing_budget_s: float = 1.0  # the harness's timing budget per shape
    check_all_dtypes: bool = False  # correctness in every dtype of the op, not only the model's
    revisit: bool = True
    max_rounds_without_keep: int = 2  # stop revisiting after this many rounds with no keep
    seed: int = 0
    # Which starters begin each target: "triton"; "cuda" (the CUDA C++ starter where the type has
    # one); "auto" (the Triton starter, then the CUDA starter as the first experiment, kept only
    # where it is faster at the profiled shapes).
    backend: str = "triton"
    # Where experiments are judged (autokernel.parallel): None, in this process on the run's one
    # device; else --gpus as given ("all", "2", "0,2,3"), one harness worker per GPU (per
    # interpreter worker on the CPU); `ray` the cluster's address (--ray) when Ray runs them.
    gpus: str | None = None
    ray: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopConfig:
        data = dict(data)
        data["move_on"] = MoveOnConfig(**data.get("move_on", {}))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})
