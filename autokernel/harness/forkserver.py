"""A fork server for harness workers: import torch and Triton once, fork a fresh worker per job.

Starting a worker from nothing costs seconds on a GPU machine (Python, then torch loading its CUDA
libraries), every experiment of a night. The server is a process that imports the worker module
and nothing else, then forks one child per job. A server runs one of `MODES`: `worker` (the
judge and its candidate processes, `autokernel.harness.worker`) or `compile` (the CPU's sm_90
compile gate, `autokernel.harness.aot_gate`, whose server imports Triton for compiling, not
interpreting, and warms its compiler up once on a kernel of its own). Each mode's `warm_up`
runs trusted code only. Forking is safe because the server never initialises CUDA, never
imports a candidate and never holds a job: each child is a copy of that clean state, and
receives its job (with the secret seed) only afterwards, on its own stdin, exactly as a spawned
worker does. The server refuses to start if the imports left a Python thread running.

Protocol, over a unix socket pair: the harness process sends one request (JSON: working
directory and environment) with three file descriptors attached (the child's stdin, its
stdout/stderr, its result pipe); the server forks, the child puts them in place (the result pipe
as fd RESULT_FD), enters its own session, dies with the server (which dies with the harness
process), changes directory and environment, and runs the worker. The server answers with the
child's pid, and later with its exit status. A child is killed through its process group, as a
spawned worker is.

Any failure of the server (it cannot start, it died, it refused) makes `spawn_worker` fall back
to a plain spawn; the verdict never depends on which path ran.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

RESULT_FD = 3  # the result pipe's number in a forked worker (job.result_fd)
_MAX_MESSAGE = 1 << 20
# mode: (module, what the server calls once after importing it or None, what each child runs)
MODES: dict[str, tuple[str, str | None, str]] = {
    "worker": ("autokernel.harness.worker", "warm_up", "main"),
    "compile": ("autokernel.harness.aot_gate", "warm_up", "main"),
}


class ForkServerError(RuntimeError):
    """The server is unusable; the caller spawns the worker the ordinary way."""


@dataclass
class ForkedWorker:
    pid: int
    server: ForkServer

    def wait(self, timeout_s: float | None) -> int | None:
        """The child's exit status (negative: killed by that signal); None on timeout."""
        return self.server.wait_exit(self.pid, timeout_s)


class ForkServer:
    """The harness process's handle on one server (one per mode, device kind and interpreter)."""

    def __init__(self, env: dict[str, str], mode: str = "worker") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown fork server mode {mode!r}")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c",
                   "from autokernel.harness.forkserver import serve; serve()"]
        self.process = subprocess.Popen(
            [*command, str(theirs.fileno()), mode], pass_fds=(theirs.fileno(),), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        self.pending: dict[str, Any] = {}
        self.exited = threading.Condition()
        reply = self._receive()
        if reply.get("ready") is not True:
            self.close()
            raise ForkServerError(f"the fork server refused to start: {reply.get('error')}")
        threading.Thread(target=self._collect_exits, daemon=True).start()

    def fork(self, cwd: str, env: dict[str, str], stdin: int, stdout: int,
             result: int) -> ForkedWorker:
        request = json.dumps({"cwd": cwd, "env": env}).encode()
        with self.lock:
            if self.process.poll() is not None:
                raise ForkServerError("the fork server is gone")
            self.sock.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                           array.array("i", [stdin, stdout, result]))])
            with self.exited:
                while not self.pending.get("started"):
                    if not self.exited.wait(timeout=30) or self.process.poll() is not None:
                        raise ForkServerError("the fork server did not fork")
                started = self.pending.pop("started")
        if "error" in started:
            raise ForkServerError(started["error"])
        return ForkedWorker(int(started["pid"]), self)

    def wait_exit(self, pid: int, timeout_s: float | None) -> int | None:
        with self.exited:
            if not self.exited.wait_for(lambda: pid in self.exits or self.process.poll()
                                        is not None, timeout=timeout_s):
                return None
            if pid not in self.exits:
                raise ForkServerError("the fork server died while a worker ran")
            return self.exits.pop(pid)

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()

    def _receive(self) -> dict[str, Any]:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.sock.recv(65536)
            if not chunk:
                return {"error": "the fork server closed its socket"}
            data += chunk
        return json.loads(data)

    def _collect_exits(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.exited:
                    self.exited.notify_all()
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                with self.exited:
                    if "exit" in message:
                        self.exits[int(message["pid"])] = int(message["exit"])
                    else:
                        self.pending["started"] = message
                    self.exited.notify_all()


# -- the server process ------------------------------------------------------------------------

def serve() -> None:
    """Entry point of the server process (argv[1]: its end of the socket pair; argv[2]: the
    mode, `worker` when absent)."""
    import importlib

    sock = socket.socket(fileno=int(sys.argv[1]))
    mode = sys.argv[2] if len(sys.argv) > 2 else "worker"
    try:
        module_name, warm_up, entry = MODES[mode]
        module = importlib.import_module(module_name)  # the point: imported once, before forks
        if warm_up is not None:
            getattr(module, warm_up)()
        from autokernel.harness.sandbox import hide_from_candidates

        hide_from_candidates()  # its /proc entries: the parent of every forked candidate
    except BaseException as exc:  # noqa: BLE001
        _send(sock, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    # A Python thread could hold a lock the child would inherit held. (torch's own native helper
    # thread is fork-safe before CUDA starts: DataLoader forks workers from such a process.)
    if threading.active_count() > 1:
        _send(sock, {"ready": False, "error": f"{threading.active_count()} Python threads after "
                                              "import"})
        return
    # CUDA does not survive a fork: a warm-up that started it would break every child.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        _send(sock, {"ready": False, "error": "CUDA was initialised by the imports or warm-up"})
        return
    # SIGCHLD wakes the loop through a pipe, so exits are reported while it waits for requests.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)

    def release_in_child() -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        selector.close()
        os.close(wake_read)
        os.close(wake_write)
        sock.close()

    _send(sock, {"ready": True})
    children: set[int] = set()
    while True:
        for key, _ in selector.select():
            if key.fileobj is wake_read:
                os.read(wake_read, 4096)
                continue
            data, fds = _receive_request(sock)
            if data is None:  # the harness process closed its end: stop, and take the children
                for pid in children:
                    _kill_group(pid)
                return
            try:
                request = json.loads(data)
                pid = os.fork()
            except (OSError, ValueError) as exc:
                _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
                for fd in fds:
                    os.close(fd)
                continue
            if pid == 0:
                release_in_child()
                _become_worker(request, fds, getattr(module, entry))
            children.add(pid)
            for fd in fds:
                os.close(fd)
            _send(sock, {"pid": pid})
        _reap(sock, children)


def _receive_request(sock: socket.socket) -> tuple[bytes | None, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_LEN(3 * fds.itemsize))
    if not data:
        return None, []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _become_worker(request: dict[str, Any], fds: list[int], main: Any) -> None:
    """In the forked child: put the descriptors and environment in place, run the mode's
    entry point (the worker's, or the compile gate's)."""
    try:
        from autokernel.harness.sandbox import show_to_self

        show_to_self()  # the server is hidden; the worker reads its own /proc files
        os.setsid()
        _die_with_parent()
        stdin, stdout, result = fds
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stdout, 2)
        os.dup2(result, RESULT_FD)
        os.set_inheritable(RESULT_FD, False)
        for fd in fds:
            if fd not in (0, 1, 2, RESULT_FD):
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # TMPDIR is this job's, not the server's
        main()
    finally:
        os._exit(70)  # main() ends the process itself; reaching here is a harness error


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _send(sock, {"pid": pid, "exit": code})


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux), so nothing outlives the harness."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
