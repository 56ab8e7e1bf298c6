"""The spawner's side: finding and killing a candidate's whole process tree, setsid'd
grandchildren included."""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass

TREE_MARKER_ENV = "AUTOKERNEL_SANDBOX_TREE"


def new_tree_marker() -> str:
    """A secret value for TREE_MARKER_ENV in one candidate's environment."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    sid: int


def _process_table() -> dict[int, _Proc]:
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: fields resume after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        table[int(entry.name)] = _Proc(int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def _carries_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _ancestors(pid: int, table: dict[int, _Proc]) -> set[int]:
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid].ppid
    return seen


def tree_members(root_pid: int, marker: str | None = None) -> set[int]:
    """Live (or zombie) processes of the tree rooted at `root_pid`: the root, its descendants,
    its session and process group when it leads them (or when it is gone), every carrier of
    `marker`, and their descendants. Never the caller or the caller's ancestors."""
    table = _process_table()
    root = table.get(root_pid)
    members = {root_pid} if root is not None else set()
    for pid, proc in table.items():
        if ((root is None or root.sid == root_pid) and proc.sid == root_pid) or \
                ((root is None or root.pgid == root_pid) and proc.pgid == root_pid):
            members.add(pid)
    if marker:
        tag = f"{TREE_MARKER_ENV}={marker}".encode()
        members |= {pid for pid in table if pid not in members and _carries_marker(pid, tag)}
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    pending = list(members)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in members:
                members.add(child)
                pending.append(child)
    return members - _ancestors(os.getpid(), table)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def wait_unreaped(pid: int, timeout_s: float | None = None) -> bool:
    """Wait until this process's child `pid` has exited (True) or `timeout_s` has passed
    (False), without reaping it: its pid stays reserved, so `kill_process_tree` can still match
    the session and group it led. Popen.wait() reaps it afterwards as usual."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:  # already reaped, or not our child
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def kill_process_tree(root_pid: int, marker: str | None = None, *, rounds: int = 50,
                      reap_timeout_s: float = 5.0) -> set[int]:
    """SIGKILL every process of the tree (`tree_members`), returning their pids.

    The tree is frozen first: members are stopped (SIGSTOP) and the table re-read until no new
    member appears, so a process forking while the sweep runs cannot leave a child behind. Then
    all are killed at once. Killed processes that are this process's children (orphans re-parented
    to a subreaper spawner) are reaped, except the root: its owner (a Popen) reaps it."""
    stopped: set[int] = set()
    for _ in range(rounds):
        fresh = tree_members(root_pid, marker) - stopped
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + reap_timeout_s
    orphans = stopped - {root_pid}
    while orphans and time.monotonic() < deadline:
        for pid in list(orphans):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours to reap
                orphans.discard(pid)
                continue
            if done:
                orphans.discard(pid)
        if orphans:
            time.sleep(0.01)
    return stopped
