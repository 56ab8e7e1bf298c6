"""Threads a candidate leaves running after a call, counted as the kernel sees them.

`threading.enumerate` lists only threads started through `threading`; one started with
`_thread.start_new_thread` (or by native code) is invisible there. The OS lists every one in
/proc/self/task, by thread id, with its name in `comm`.
"""

from __future__ import annotations

import os
import threading

TASKS = "/proc/self/task"


def live_threads() -> set[int]:
    """Thread ids of every live OS thread of this process (Python's own list where /proc is
    not there)."""
    try:
        return {int(name) for name in os.listdir(TASKS)}
    except OSError:
        return {t.native_id for t in threading.enumerate() if t.native_id is not None}


def _name(tid: int) -> str:
    try:
        with open(f"{TASKS}/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def new_threads(before: set[int]) -> list[str]:
    """'name (thread 1234)' for each thread alive now that was not in `before`."""
    return [f"{_name(tid)} (thread {tid})" for tid in sorted(live_threads() - before)]


def start_thread_pools() -> None:
    """Start, now, the thread pools a call could otherwise start lazily: torch's intra-op pool
    and the BLAS pools of torch and numpy (the interpreter's `tl.dot` runs numpy). A fork
    leaves each pool to be re-created on its first parallel use, which would then show as a
    thread the candidate left running; a long-running production process has them all."""
    import numpy

    import torch

    torch.ones(1 << 16).sum()
    square = torch.ones(256, 256)
    square @ square
    for dtype in (numpy.float32, numpy.float64):
        block = numpy.ones((256, 256), dtype=dtype)
        block @ block
