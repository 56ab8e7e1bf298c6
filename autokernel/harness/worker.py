"""The worker: one process per `autokernel bench` call, split at its start.

`autokernel.harness.spawn` starts it (forked from the fork server, or spawned as `python -m
autokernel.harness.worker`) in a new session, with a scrubbed environment, in a temporary
directory holding one subdirectory per candidate process (`ROLES`: the candidate's file, and the
incumbent's when one is timed alongside), sends the job on stdin and reads one report from a
private pipe.

Before it reads anything, the worker forks one child per role. Each becomes a candidate process
(`candidate`): stdin, the result pipe and every other descriptor closed, it keeps only its end of
a socket to the parent and its stdout/stderr, moves into its own directory, where its private,
fresh Triton and Inductor caches are (nothing it compiles is ever loaded by a trusted process or
by a later candidate), and waits to be told what to do. The parent becomes the judge (`judge`):
it makes itself non-dumpable, reads the job with its secret, computes every reference, and drives
the candidate processes over their sockets. Only the judge writes the report, so nothing a
candidate does can forge it or reach what decides it.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import traceback
from pathlib import Path

import torch

from autokernel.harness.candidate import Candidate
from autokernel.harness.judge import Judge
from autokernel.harness.judge_channel import Endpoint
from autokernel.harness.protocol import Job, WorkerReport, encode_report

ROLES = ("candidate", "incumbent")
PRIVATE_TRITON_CACHE = "triton-cache"
# Shared libraries a trusted process built from Triton's own generated C (its driver utilities
# and launchers, keyed by their source's hash): copied from the trusted cache into a candidate's
# private one, so that each new process does not spend seconds in the C compiler.
TRUSTED_BUILDS = ("cuda_utils", "__triton_launcher")


def private_dirs(role: str) -> Path:
    """This candidate process's directory; its caches, HOME and TMPDIR inside it."""
    home = Path.cwd() / role
    home.mkdir(exist_ok=True)
    for name in (PRIVATE_TRITON_CACHE, "inductor-cache", "tmp"):
        (home / name).mkdir(exist_ok=True)
    return home


def seed_private_cache(trusted: str | None, private: Path) -> None:
    """Copy the trusted cache's driver and launcher libraries into a private cache."""
    if not trusted or not Path(trusted).is_dir():
        return
    for entry in Path(trusted).iterdir():
        try:
            files = list(entry.iterdir()) if entry.is_dir() else []
        except OSError:
            continue
        if files and all(f.name.startswith(TRUSTED_BUILDS) and f.suffix == ".so"
                         for f in files) and not (private / entry.name).exists():
            shutil.copytree(entry, private / entry.name)


def _become_candidate(sock: socket.socket, role: str) -> None:
    """In a forked child: nothing of the parent's but its stdout/stderr and the socket, in its
    own directory with private caches."""
    try:
        keep = sock.fileno()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        home = private_dirs(role)
        os.chdir(home)
        trusted = os.environ.get("TRITON_CACHE_DIR")
        os.environ.update({"TRITON_CACHE_DIR": str(home / PRIVATE_TRITON_CACHE),
                           "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor-cache"),
                           "HOME": str(home), "TMPDIR": str(home / "tmp")})
        import tempfile

        tempfile.tempdir = None
        if os.environ.get("TRITON_INTERPRET") != "1":
            seed_private_cache(trusted, home / PRIVATE_TRITON_CACHE)
        Candidate(sock).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def warm_up() -> None:
    """In the worker fork server, once: scipy's statistics and every op entry imported and,
    under the interpreter, one trusted Triton launch interpreted (Triton initialises its type
    specialisation on the first), so that each forked judge and candidate process starts with
    them; then the dispatcher's
    aten tables, which each candidate process's identity snapshot starts from. Trusted code
    only; on a GPU nothing here may touch CUDA, so no launch."""
    import scipy.stats  # noqa: F401 - the judge's paired bootstrap (`paired`) imports it late
    # to keep the CLI light; each forked judge would otherwise import it again (~2 s on 2 cores)

    from autokernel.harness.guards.ops import remember_server_tables
    from autokernel.ops import all_specs

    all_specs()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from autokernel.harness.probe import warm_launch

        warm_launch()
    remember_server_tables()


def main() -> None:
    from autokernel.harness.sandbox import hide_from_candidates

    children: dict[str, tuple[socket.socket, int]] = {}
    for role in ROLES:
        judge_end, candidate_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            for other, _ in children.values():
                other.close()
            _become_candidate(candidate_end, role)
        candidate_end.close()
        children[role] = (judge_end, pid)
    hide_from_candidates()
    job = Job.from_json(sys.stdin.buffer.read())
    result = os.fdopen(job.result_fd, "w", encoding="utf-8")
    device = torch.device("cuda", 0) if job.device == "cuda" else torch.device("cpu")
    candidate = Endpoint("candidate", *children["candidate"], device)
    incumbent = Endpoint("incumbent", *children["incumbent"], device)
    if job.incumbent_path is None or job.correctness_only:
        incumbent.close()
        judge = Judge(job, candidate, None)
    else:
        judge = Judge(job, candidate, incumbent)
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
    # runner then ends the candidate processes with the rest of the tree).
    os._exit(0)


if __name__ == "__main__":
    main()
