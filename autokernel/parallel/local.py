"""One worker process per GPU of this machine: `LocalPool`.

Each worker is a one-process `concurrent.futures.ProcessPoolExecutor` (spawned: nothing of the
head, CUDA included, is inherited), pinned to its GPU by its environment (`slots.Slot.env`). It
ignores Ctrl-C (the head decides when to stop, and lets the experiments in flight finish) and is
killed by the kernel when the head dies (the parent-death signal), so a killed head leaves no
worker judging for nobody.

A worker that dies (kill -9, out of memory) breaks only its own executor: `is_lost` says so, and
`restart` starts a fresh process on the same GPU, where the head judges the lost job again.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from autokernel.parallel.slots import Slot
from autokernel.parallel.worker import JudgeJob, JudgeOutcome, JudgeWorker, WorkerIdentity

# The worker process's one JudgeWorker, made by its executor's initializer.
_worker: JudgeWorker | None = None


def _start(label: str, directory: str, device: str, env: dict[str, str],
           harness_cache: str | None) -> None:
    global _worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    _worker = JudgeWorker(label, directory, device, env, harness_cache=harness_cache)


def _hello() -> WorkerIdentity:
    assert _worker is not None
    return _worker.hello()


def _judge(job: JudgeJob) -> JudgeOutcome:
    assert _worker is not None
    return _worker.judge(job)


class LocalPool:
    """A worker process per slot; `submit(i, job)` runs the job on slot i's worker."""

    kind = "local"

    def __init__(self, slots: list[Slot], directory: Path,
                 harness_cache: Path | None = None) -> None:
        self.slots = slots
        self.directory = Path(directory)
        self.harness_cache = harness_cache  # shared by the workers; None: each its own
        self._executors: list[ProcessPoolExecutor | None] = [None] * len(slots)
        self._pids: list[int | None] = [None] * len(slots)

    def _executor(self, index: int) -> ProcessPoolExecutor:
        executor = self._executors[index]
        if executor is None:
            slot = self.slots[index]
            executor = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(slot.label, str(self.directory / slot.label), slot.device, slot.env(),
                          None if self.harness_cache is None else str(self.harness_cache)))
            self._executors[index] = executor
        return executor

    def start(self) -> list[WorkerIdentity]:
        """Start every worker; each says who it is (pid, GPU model)."""
        hellos = [self._executor(i).submit(_hello) for i in range(len(self.slots))]
        identities = [h.result() for h in hellos]
        self._pids = [identity.pid for identity in identities]
        return identities

    def submit(self, index: int, job: JudgeJob) -> Future[JudgeOutcome]:
        return self._executor(index).submit(_judge, job)

    @staticmethod
    def is_lost(error: BaseException) -> bool:
        """Whether a job failed because its worker died (not because of the job)."""
        return isinstance(error, BrokenProcessPool)

    def restart(self, index: int) -> Future[WorkerIdentity]:
        """A fresh worker for slot i, after its process was lost; the future says who it is.
        Call it from the thread that started the pool: the worker's parent-death signal fires
        when the thread that spawned it ends."""
        executor = self._executors[index]
        self._executors[index] = None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        hello = self._executor(index).submit(_hello)

        def note_pid(done: Future[WorkerIdentity]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._pids[index] = done.result().pid

        hello.add_done_callback(note_pid)
        return hello

    def close(self, *, abandon: bool = False) -> None:
        """Stop every worker; `abandon`: without waiting for jobs in flight (their harness runs
        die with them)."""
        for index, executor in enumerate(self._executors):
            if executor is None:
                continue
            pid = self._pids[index]
            if abandon and pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            executor.shutdown(wait=not abandon, cancel_futures=True)
            self._executors[index] = None
