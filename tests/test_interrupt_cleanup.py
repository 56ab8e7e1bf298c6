"""Issue 29: a double Ctrl-C during an experiment leaves no process behind.

`autokernel run` on a tiny softmax problem; once a harness worker runs (forked by the fork
server, each in a session of its own, so the terminal's Ctrl-C reaches neither), two SIGINTs: the
second aborts the experiment. Every process the run started must be gone soon after it exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "tests" / "fixtures" / "kernelbench_tiny" / "softmax_rows.py"


def children_of() -> dict[int, list[int]]:
    """Every live process's children, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = children_of(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def worker_server(pid: int) -> bool:
    """The harness's worker fork server (its command line ends with its mode, `worker`)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"forkserver" in b" ".join(argv) and argv[-2:] in ([b"worker", b""], [b"worker"])


def wait_gone(pids: set[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_double_ctrl_c_leaves_no_process_behind(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "100", "PYTHONUNBUFFERED": "1"}  # lines as they are said
    env.pop("ANTHROPIC_API_KEY", None)
    run = subprocess.Popen(
        [sys.executable, "-m", "autokernel", "run", str(PROBLEM), "--device", "cpu", "--agent",
         "tuner", "--out", str(tmp_path / "run"), "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(
        line.decode(errors="replace") for line in iter(run.stdout.readline, b"")), daemon=True)
    reader.start()
    seen: set[int] = set()
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None:  # until a worker runs
            servers = descendants(run.pid)
            seen |= servers
            # A judge forked by the harness's worker fork server (the compile server's own
            # children, e.g. its C compiler at warm-up, come before any experiment runs)
            workers = set().union(*(descendants(child) for child in servers
                                    if worker_server(child)))
            if workers:
                break
            time.sleep(0.2)
        assert workers, "the run ended before a harness worker started"
        seen |= workers
        run.send_signal(signal.SIGINT)
        time.sleep(0.5)
        run.send_signal(signal.SIGINT)
        while run.poll() is None and not any(x.startswith("stopped:") for x in lines):
            time.sleep(0.05)
        # The aborted experiment's worker is gone as the run stops, not only once it exits.
        assert not wait_gone(workers, 0.3), "the aborted worker outlived the experiment"
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    reader.join(timeout=10)
    text = "".join(lines)
    assert run.returncode == 130, text[-3000:]
    assert "aborted by a second Ctrl-C" in text, text[-3000:]
    assert not wait_gone(seen, 3), "processes of the run outlived it"
