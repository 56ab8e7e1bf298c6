"""`autokernel kernelbench --gpus`: one problem per GPU at once.

Each problem runs as with one GPU (`suite.run_one`: its own child process, workspace and log),
its child pinned to a GPU of its own with CUDA_VISIBLE_DEVICES and NVLink multicast off
(`autokernel.parallel.slots.Slot.env`); as a problem ends, its GPU takes the next. On the CPU,
`--gpus N` runs N problems at once in the interpreter. Each record says where it ran (`worker`);
the tables are rewritten after every problem, in the problems' order. Ctrl-C stops every
running problem (each recorded as interrupted, so `--resume` runs it again) and the set.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from autokernel.kernelbench.problem import ProblemJob
from autokernel.kernelbench.progress import Phase
from autokernel.kernelbench.suite import (LOGS_DIR, SuiteInterrupted, hard_limit_s, problem_names,
                                          run_one)
from autokernel.parallel.slots import Slot

STOP_WAIT_S = 0.5


def run_suite_on_gpus(problems: list[Path], out: Path, template: ProblemJob, slots: list[Slot],
                      on_record: Callable[[int, dict[str, Any], list[dict[str, Any]]], None],
                      on_start: Callable[[int, Path], None] = lambda i, p: None,
                      finished: dict[str, dict[str, Any]] | None = None,
                      on_phase: Callable[[int, Phase], None] | None = None,
                      ) -> list[dict[str, Any]]:
    """`suite.run_suite` with a problem on each of `slots` at once; the same callbacks, called
    from the problems' threads (`on_record` one at a time). Raises SuiteInterrupted on Ctrl-C,
    once every running problem is stopped and recorded."""
    finished = finished or {}
    logs = out / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    names = problem_names(problems)
    done: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()
    free: queue.Queue[Slot] = queue.Queue()
    for slot in slots:
        free.put(slot)
    stop = threading.Event()

    def record(index: int, entry: dict[str, Any]) -> None:
        with lock:
            done[index] = entry
            on_record(index, entry, [done[i] for i in sorted(done)])

    def run(index: int, path: Path, name: str) -> None:
        # As many threads as slots, each holding one at a time: a slot is always free here.
        slot = free.get()
        try:
            if stop.is_set():
                return
            job = replace(template, problem=str(path), workspace=str(out / name),
                          result_path=str(logs / f"{name}.json"))
            if (out / name).exists():
                shutil.rmtree(out / name)
            on_start(index, path)
            try:
                entry = run_one(job, logs / f"{name}.log", hard_limit_s(template.minutes),
                                watch=None if on_phase is None else
                                (lambda phase: on_phase(index, phase)),
                                env=slot.env(), stop=stop)
            except SuiteInterrupted as interrupted:
                entry = interrupted.record
            entry.update(problem=name, log=str(logs / f"{name}.log"), worker=slot.label)
            record(index, entry)
        finally:
            free.put(slot)

    for index, name in enumerate(names):
        if name in finished:
            record(index, finished[name])
    pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="kernelbench")
    futures = [pool.submit(run, i, path, name) for i, (path, name)
               in enumerate(zip(problems, names)) if name not in finished]
    try:
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=STOP_WAIT_S)
    except KeyboardInterrupt:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        stopped = [done[i] for i in sorted(done) if done[i].get("status") == "interrupted"]
        raise SuiteInterrupted(stopped[0] if stopped else {"reason": "interrupted"}) from None
    pool.shutdown(wait=True)
    for future in futures:
        future.result()  # a bug in a problem's thread is not swallowed
    return [done[i] for i in sorted(done)]
