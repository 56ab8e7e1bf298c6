"""The worker: one process per `autokernel bench` call, split in two at its start.

`autokernel.harness.spawn` starts it (forked from the fork server, or spawned as `python -m
autokernel.harness.worker`) in a new session, with a scrubbed environment, in a temporary
directory holding a copy of the kernel file, sends the job on stdin and reads one report from a
private pipe.

Before it reads anything, the worker forks. The child becomes the candidate process
(`candidate`): stdin, the result pipe and every other descriptor closed, it keeps only its end of
a socket to the parent and its stdout/stderr, and waits to be told what to do. The parent becomes
the judge (`judge`): it makes itself non-dumpable, reads the job with its secret seed, computes
every reference, and drives the candidate process over the socket. Only the judge writes the
report, so nothing the candidate does can forge it or reach what decides it.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback

from autokernel.harness.candidate import Candidate
from autokernel.harness.judge import Judge
from autokernel.harness.protocol import Job, WorkerReport, encode_report


def _become_candidate(sock: socket.socket) -> None:
    """In the forked child: nothing of the parent's but its stdout/stderr and the socket."""
    try:
        keep = sock.fileno()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        Candidate(sock).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main() -> None:
    from autokernel.harness.sandbox import hide_from_candidates

    judge_end, candidate_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        judge_end.close()
        _become_candidate(candidate_end)
    candidate_end.close()
    hide_from_candidates()
    job = Job.from_json(sys.stdin.buffer.read())
    result = os.fdopen(job.result_fd, "w", encoding="utf-8")
    judge = Judge(job, judge_end, pid)
    try:
        report = judge.run()
    except BaseException:  # a bug in the harness, not a verdict on the candidate
        report = WorkerReport(status="CRASH", stage="harness",
                              reason="internal harness error: "
                                     + traceback.format_exc(limit=-3).strip()[-1500:])
    result.write(encode_report(job.nonce, report))
    result.flush()
    judge.close()
    # Skip interpreter teardown: nothing may change or delay the verdict once it is written (the
    # runner then ends the candidate process with the rest of the tree).
    os._exit(0)


if __name__ == "__main__":
    main()
