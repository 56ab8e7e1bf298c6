"""What the harness process and its worker say to each other.

The job goes to the worker over stdin (never argv or the environment, where other processes and
the candidate could read it); it carries the secret seed. The report comes back over a pipe whose
file descriptor only the worker knows (it is passed with `pass_fds` and named in the job), as
exactly one JSON line carrying the job's nonce. The candidate's stdout and stderr are a separate
pipe, captured only to explain a crash, so printing can never forge a verdict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

WORKER_MODULE = "autokernel.harness.worker"


@dataclass
class Job:
    kernel_path: str  # the worker's private copy of the candidate
    kernel_type: str
    device: str
    timing_shapes: list[list[int]]  # primary first
    timing_dtypes: list[str]
    correctness_dtypes: list[str]
    model_shapes: list[list[int]]
    params: dict[str, Any]
    seed: int  # secret, 256 bits: every seed of the job derives from it (`seeds`)
    nonce: str  # secret: authenticates the report line
    result_fd: int
    quick: bool = False
    timing_budget_s: float = 1.0
    cached_baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    incumbent_path: str | None = None  # the worker's copy of the current best, timed alongside
    # in a process of its own
    min_gain: float = 0.01  # a paired interval straddling 1 + min_gain widely is re-timed once
    correctness_only: bool = False  # every correctness and anti-cheat stage, then no timing
    # Tests only: the correctness stages to run (None: all); the others say "skip".
    only_stages: list[str] | None = None
    # Backend name -> the builds (candidate's, incumbent's) the runner made, in the backend's
    # format (`backends.interface.Build.entries`); the candidate process loads them before its
    # sandbox and may build nothing else.
    prebuilt: dict[str, list[list[str]]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Job:
        return cls(**json.loads(text))


@dataclass
class TimedShape:
    """Raw timing at one (shape, dtype); the harness process turns it into throughput.

    `*_us` are device-time medians over the timed rounds; `*launch_us` the host launch cost (one
    synchronous call's wall time minus its device time), from separate calls. The per-round lists
    pair candidate and incumbent by round, for the parent's bootstrap.
    """

    shape: list[int]
    dtype: str
    latency_us: float
    iqr_us: float
    samples: int
    eager_us: float | None = None
    eager_iqr_us: float | None = None
    compile_us: float | None = None
    compile_iqr_us: float | None = None
    compile_cached: bool = False
    launch_us: float | None = None
    eager_launch_us: float | None = None
    compile_launch_us: float | None = None
    incumbent_us: float | None = None
    incumbent_iqr_us: float | None = None
    incumbent_launch_us: float | None = None
    liger_us: float | None = None  # Liger-Kernel's version of the op, when installed
    candidate_rounds_us: list[float] = field(default_factory=list)
    incumbent_rounds_us: list[float] = field(default_factory=list)
    retimed: bool = False  # the paired interval was too wide; timed again with more rounds
    calls_per_round: int = 1  # each round's sample is the mean of this many calls
    retried_batches: int = 0
    host_bound_batches: int = 0


@dataclass
class WorkerReport:
    status: str
    stage: str | None = None
    reason: str = ""
    rule: str | None = None
    detail: str = ""  # the full text behind `reason` (traceback, compiler message), bounded
    stages: dict[str, str] = field(default_factory=dict)
    stage_cases: dict[str, int] = field(default_factory=dict)
    timings: list[TimedShape] = field(default_factory=list)
    peak_vram_mb: float | None = None
    gpu_spec: dict[str, Any] | None = None  # autokernel.gpu.database.GPUSpec, as a dict
    ceilings: dict[str, Any] | None = None  # autokernel.gpu.calibrate.Ceilings, as a dict
    device_name: str = ""
    torch_version: str = ""
    triton_version: str = ""
    new_baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)  # harness.sandbox.SandboxState
    launch_digest: str | None = None  # guards.launch_digest of one call at the primary shape
    incumbent_launch_digest: str | None = None
    # CPU: every correctness call's Triton launches, specialised for sm_90 (`aot_gate`): the runner
    # compiles them before a PASS stands.
    aot_requests: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerReport:
        data = dict(data)
        data["timings"] = [TimedShape(**t) for t in data.get("timings", [])]
        return cls(**data)


def encode_report(nonce: str, report: WorkerReport) -> str:
    return json.dumps({"nonce": nonce, "report": report.to_dict()}) + "\n"


class ChannelError(ValueError):
    """The result channel held something other than one report with the right nonce."""


def decode_report(raw: bytes, nonce: str) -> WorkerReport | None:
    """The report in `raw`; None when the worker wrote nothing (it died first)."""
    lines = [line for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return None
    if len(lines) != 1:
        raise ChannelError(f"{len(lines)} messages on the result channel, expected one")
    try:
        message = json.loads(lines[0])
        if message.get("nonce") != nonce:
            raise ChannelError("a result without the job's nonce")
        return WorkerReport.from_dict(message["report"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ChannelError(f"unreadable result ({exc})") from exc


def baseline_key(kernel_type: str, shape: list[int] | tuple[int, ...], dtype: str, gpu: str,
                 torch_version: str, params: dict[str, Any]) -> str:
    """Cache key of a compiled-stock timing: op, shape, dtype, GPU, torch version, params."""
    shape_text = "x".join(str(d) for d in shape)
    params_text = ",".join(f"{k}={params[k]!r}" for k in sorted(params))
    return f"{kernel_type}|{shape_text}|{dtype}|{gpu}|torch {torch_version}|{params_text}"
