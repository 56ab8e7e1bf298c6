"""What a worker runs: `JudgeWorker.judge(job)` is one candidate's verdict on the worker's GPU.

The same code as the one-GPU loop's (`autokernel.loop.judge.Judge`: the quick screen, then the
full harness for a candidate about to be kept, then the keep rule), run in a directory of the
worker's own: the candidate's kernel.py, the target's best as the incumbent, the harness's caches
(its torch.compile baselines are this GPU's own). The incumbent is timed in the same rounds as the
candidate, on the candidate's GPU, so a keep never compares timings of two GPUs; the one verdict
that would (the unpaired fallback, when the incumbent no longer runs) is refused when the best was
timed on another worker.

A job carries everything the verdict needs (plan, target, config, sources), so a worker needs no
access to the workspace: a Ray actor on another node judges exactly like a local process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autokernel.harness.result import BenchResult
from autokernel.loop.config import LoopConfig
from autokernel.loop.state import InFlight, TargetState
from autokernel.profiling.plan import Plan


@dataclass
class JudgeJob:
    """One candidate to judge. `target` is the target's state when the job was handed out: its
    best is the incumbent (`incumbent` its source, `best_commit` its commit)."""

    number: int  # the head's count of jobs handed out, for its bookkeeping
    plan: Plan
    target: TargetState
    config: LoopConfig
    source: str
    incumbent: str | None
    best_commit: str | None
    baseline: bool = False
    experiment: int = 0  # the experiment number it will probably get (its record decides)


@dataclass
class JudgeOutcome:
    """A job's verdict, as the head journals it (`InFlight.result`, verdict, reason, vs_best)."""

    result: dict[str, Any]
    verdict: str
    reason: str
    vs_best: list[float] | None
    seconds: float  # wall time of the verdict on the worker
    worker: str  # the worker's label: results.tsv's gpu column
    pid: int


@dataclass
class WorkerIdentity:
    """What a worker says of itself when it starts (and after a restart)."""

    label: str
    pid: int
    host: str
    device_name: str  # the GPU's model ("NVIDIA H200"), or "cpu"


class JudgeWorker:
    """Judges jobs one at a time in `directory` (made if missing), on its process's one device."""

    def __init__(self, label: str, directory: str | Path, device: str,
                 env: dict[str, str] | None = None,
                 bench: Callable[..., BenchResult] | None = None,
                 harness_cache: str | Path | None = None) -> None:
        # Before anything touches CUDA: the GPU this worker is pinned to, multicast off.
        os.environ.update(env or {})
        self.bench = bench  # None: the harness (`run_bench`); a test's stand-in otherwise
        self.label = label
        self.device = device
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # Compile caches shared by the workers of a machine (a kernel compiled for one GPU is
        # not compiled again for the next); None: the worker's own.
        self.harness_cache = Path(harness_cache) if harness_cache is not None else None

    def hello(self) -> WorkerIdentity:
        return WorkerIdentity(label=self.label, pid=os.getpid(), host=socket.gethostname(),
                              device_name=device_name(self.device))

    def judge(self, job: JudgeJob) -> JudgeOutcome:
        from autokernel.loop.judge import Judge
        from autokernel.loop.workspace import Workspace

        started = time.perf_counter()
        # A Workspace only in name: the Judge reads kernel.py and writes its caches here.
        place = Workspace(self.directory)
        place.cache_dir.mkdir(exist_ok=True)  # the incumbent's file goes there
        place.write_kernel(job.source)
        judge = Judge(place, job.plan, job.config, self.bench,
                      best_source=lambda target: job.incumbent or "",
                      harness_cache=self.harness_cache)
        flight = InFlight(experiment=job.experiment, target=0, phase="written", source=job.source,
                          description="", agent="", baseline=job.baseline)
        result, decision = judge.verdict(job.target, flight)
        status, reason, vs_best = decision.status, decision.reason, decision.vs_best
        best = job.target.best
        if (status == "keep" and vs_best is None and best is not None and best.passed
                and best.latency_us is not None and best.gpu != self.label):
            status = "revert"
            reason = (f"not kept: the best was not timed alongside (unpaired), and its recorded "
                      f"time is from {describe_worker(best.gpu)}, not {describe_worker(self.label)}"
                      f"; timings of two GPUs are never compared ({reason})")
        return JudgeOutcome(
            result=result.to_dict(), verdict=status, reason=reason,
            vs_best=None if vs_best is None else [vs_best.estimate, vs_best.low, vs_best.high],
            seconds=time.perf_counter() - started, worker=self.label, pid=os.getpid())


def describe_worker(label: str) -> str:
    if not label:
        return "the run's earlier single device"
    return f"worker {label}" if "cpu" in label else f"GPU {label}"


def device_name(device: str) -> str:
    """The model of this process's GPU (its first visible one), or "cpu". Asked of nvidia-smi,
    so the worker makes no CUDA context of its own (its harness's processes do the work); from
    torch where nvidia-smi is missing."""
    if device != "cuda":
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader",
                                 "-i", visible], capture_output=True, text=True, timeout=30)
        name = answer.stdout.strip().splitlines()[0].strip() if answer.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        name = ""
    if name:
        return name
    import torch

    return torch.cuda.get_device_name(0)
