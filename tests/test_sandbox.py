"""The candidate sandbox (`autokernel.harness.sandbox`), shown on real processes.

Each sandbox is applied in a fresh child interpreter (it is irreversible), which then tries what
a hostile candidate would and reports each outcome as JSON. A test whose layer the kernel lacks
is skipped, after checking that `sandbox_capabilities()` (what `autokernel doctor` shows) says so.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from autokernel.harness.sandbox import (
    CANDIDATE_FEATURES, FEATURES, TREE_MARKER_ENV, SandboxState, become_subreaper,
    elf_interpreter, kill_process_tree, new_tree_marker, observed_confinement, program_closure,
    sandbox_capabilities, toolchain_check, toolchain_executables, tree_members,
    unwrapped_c_compiler, wait_unreaped,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux features")
REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 300
CAPABILITIES = sandbox_capabilities()

# Runs inside the sandboxed child. `pre` happens before the sandbox, `attempt` after it.
HOSTILE_CANDIDATE = r'''
import ctypes, errno, json, os, socket, subprocess, sys, threading
from pathlib import Path
from autokernel.harness.sandbox import apply_candidate_sandbox

cfg = json.loads(sys.argv[1])
work, cache, outside = Path(cfg["work"]), Path(cfg["cache"]), Path(cfg["outside"])
pre_made_inet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # only Landlock can stop it now
state = apply_candidate_sandbox(work, [cache], [Path(cfg["tool"])], "cpu")
libc = ctypes.CDLL(None, use_errno=True)
outcomes = {}

def attempt(name, action):
    try:
        outcomes[name] = {"ok": True, "value": action()}
    except OSError as exc:
        outcomes[name] = {"ok": False, "errno": exc.errno, "error": str(exc)}

def raw(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result

def fork_and_exec():
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/true", ["/bin/true"])
    return os.waitpid(pid, 0)[1]

def write(path, text="x"):
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path.read_text()

def unix_pair():
    for end in socket.socketpair():
        end.close()

def thread_result():
    box = []
    thread = threading.Thread(target=lambda: box.append(sum(range(10))))
    thread.start()
    thread.join()
    return box[0]

attempt("subprocess", lambda: subprocess.run(["/bin/true"]).returncode)
attempt("os_system", lambda: os.waitstatus_to_exitcode(os.system("/bin/true")))
attempt("fork_exec", fork_and_exec)
attempt("posix_spawn", lambda: os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {}), 0)[1])
attempt("tool", lambda: subprocess.run([cfg["tool"], "tool-ran"], capture_output=True,
                                       text=True).stdout.strip())
attempt("write_work", lambda: write(work / "scratch.txt"))
attempt("write_cache", lambda: write(cache / "sub" / "entry.bin"))
attempt("write_outside", lambda: write(outside / "planted.txt"))
attempt("overwrite_outside", lambda: write(outside / "existing.txt", "changed"))
attempt("mkdir_outside", lambda: (outside / "newdir").mkdir())
attempt("move_out", lambda: os.rename(work / "scratch.txt", outside / "moved.txt"))
attempt("read_outside", lambda: (outside / "existing.txt").read_text())
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
attempt("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
attempt("unix_pair", unix_pair)
attempt("tcp_connect", lambda: pre_made_inet.connect(("127.0.0.1", cfg["port"])))
attempt("setsid", os.setsid)
attempt("setpgid", lambda: os.setpgid(0, 0))
attempt("ptrace", lambda: raw(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
attempt("signal_everyone", lambda: os.kill(-1, 0))  # signal 0: harmless even if allowed
attempt("unset_subreaper", lambda: raw(libc.prctl(36, 0, 0, 0, 0)))
attempt("unshare", lambda: raw(libc.unshare(0x10000000)))  # CLONE_NEWUSER
attempt("chmod_outside", lambda: os.chmod(outside / "existing.txt", 0o777))
attempt("chown_outside", lambda: os.chown(outside / "existing.txt", os.getuid(), os.getgid()))
attempt("setxattr", lambda: os.setxattr(outside / "existing.txt", "user.planted", b"1"))
attempt("mount", lambda: raw(libc.mount(b"none", str(work).encode(), b"tmpfs", 0, None)))
attempt("thread", thread_result)
print(json.dumps({"state": state.to_dict(), "outcomes": outcomes}))
'''


def _python(script: str, *args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, env={**base, **(env or {})},
                          cwd=cwd or REPO)


def _last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _require(*features: str) -> None:
    """Skip unless every feature is available here; a skip is only ever what doctor reports."""
    absent = {name: CAPABILITIES[name].detail for name in features
              if not CAPABILITIES[name].available}
    for name, detail in absent.items():
        assert detail, f"{name} unavailable without a reason"
    if absent:
        pytest.skip("; ".join(f"{name}: {detail}" for name, detail in absent.items()))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One sandboxed child that tries everything; its state and each attempt's outcome."""
    root = tmp_path_factory.mktemp("sandbox")
    work, cache, outside = root / "work", root / "cache", root / "outside"
    for path in (work, cache, outside):
        path.mkdir()
    (outside / "existing.txt").write_text("original")
    tool = root / "toolchain" / "fake-ptxas"  # a stand-in for ptxas: /bin/echo, renamed
    tool.parent.mkdir()
    shutil.copy2(shutil.which("echo") or "/bin/echo", tool)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        done = _python(HOSTILE_CANDIDATE, json.dumps({
            "work": str(work), "cache": str(cache), "outside": str(outside), "tool": str(tool),
            "port": listener.getsockname()[1]}), cwd=work)
    finally:
        listener.close()
    report = _last_json(done)
    report["outside"] = outside
    return report


def _denied(hostile: dict[str, Any], name: str, *errnos: int) -> None:
    outcome = hostile["outcomes"][name]
    assert not outcome["ok"], f"{name} was allowed: {outcome}"
    if errnos:
        assert outcome["errno"] in errnos, outcome


def _allowed(hostile: dict[str, Any], name: str) -> Any:
    outcome = hostile["outcomes"][name]
    assert outcome["ok"], f"{name} was denied: {outcome}"
    return outcome["value"]


# -- capabilities and state ------------------------------------------------------------------------

def test_capabilities_cover_every_feature_with_a_reason() -> None:
    assert set(CAPABILITIES) == set(FEATURES)
    for name, capability in CAPABILITIES.items():
        assert isinstance(capability.available, bool)
        assert capability.detail, name
    assert set(CANDIDATE_FEATURES) == set(FEATURES) - {"tree_sweep"}


def test_the_state_accounts_for_every_feature(hostile: dict[str, Any]) -> None:
    state = hostile["state"]
    assert set(state["applied"]) | set(state["missing"]) == set(CANDIDATE_FEATURES)
    assert not set(state["applied"]) & set(state["missing"])
    for name, why in state["missing"].items():
        assert why, name
        assert not CAPABILITIES[name].available, (
            f"{name} is available here but was not applied: {why}")
    assert state["complete"] == (not state["missing"])


def test_notes_name_what_was_not_applied() -> None:
    state = SandboxState(applied={"seccomp": "all threads"},
                         missing={"landlock_fs": "landlockpy not importable"})
    assert not state.complete
    assert state.notes() == ["sandbox: seccomp applied: all threads",
                             "sandbox: landlock_fs NOT applied: landlockpy not importable"]


def test_a_missing_library_is_reported_not_silent(tmp_path: Path) -> None:
    """With pyseccomp unimportable, the other layers still apply and the state says why."""
    done = _python(textwrap.dedent('''
        import json, os, sys
        from pathlib import Path
        sys.modules["pyseccomp"] = None  # as on a machine without the wheel
        from autokernel.harness.sandbox import apply_candidate_sandbox
        state = apply_candidate_sandbox(Path(sys.argv[1]), [], [], "cpu")
        print(json.dumps({"state": state.to_dict(), "notes": state.notes()}))
    '''), str(tmp_path))
    report = _last_json(done)
    assert "pyseccomp" in report["state"]["missing"]["seccomp"]
    assert report["state"]["complete"] is False
    assert any("seccomp NOT applied" in line and "pyseccomp" in line for line in report["notes"])
    if CAPABILITIES["landlock_fs"].available:
        assert "landlock_fs" in report["state"]["applied"]


# -- what a sandboxed candidate cannot do ----------------------------------------------------------

@pytest.mark.parametrize("how", ["subprocess", "posix_spawn"])
def test_it_cannot_execute_a_program(hostile: dict[str, Any], how: str) -> None:
    _require("landlock_fs")
    _denied(hostile, how, errno.EACCES)


def test_os_system_cannot_run_its_shell(hostile: dict[str, Any]) -> None:
    _require("landlock_fs")
    assert _allowed(hostile, "os_system") == 127  # the shell could not be executed


def test_it_cannot_fork(hostile: dict[str, Any]) -> None:
    _require("seccomp")
    _denied(hostile, "fork_exec", errno.EPERM)


def test_it_can_still_run_the_toolchain(hostile: dict[str, Any]) -> None:
    _require("landlock_fs", "seccomp")
    assert _allowed(hostile, "tool") == "tool-ran"


def test_it_writes_only_in_its_directories(hostile: dict[str, Any]) -> None:
    _require("landlock_fs")
    assert _allowed(hostile, "write_work") == "x"
    _allowed(hostile, "write_cache")
    for attempt in ("write_outside", "overwrite_outside", "mkdir_outside", "move_out"):
        _denied(hostile, attempt, errno.EACCES, errno.EXDEV)
    assert _allowed(hostile, "read_outside") == "original"
    outside = hostile["outside"]
    assert sorted(p.name for p in outside.iterdir()) == ["existing.txt"]
    assert (outside / "existing.txt").read_text() == "original"


@pytest.mark.parametrize("family", ["inet", "inet6", "netlink"])
def test_it_cannot_open_a_network_socket(hostile: dict[str, Any], family: str) -> None:
    _require("seccomp")
    _denied(hostile, family, errno.EPERM)


def test_it_can_open_unix_sockets(hostile: dict[str, Any]) -> None:
    _require("seccomp")
    _allowed(hostile, "unix")
    _allowed(hostile, "unix_pair")


def test_a_socket_made_before_the_sandbox_cannot_connect(hostile: dict[str, Any]) -> None:
    _require("landlock_net")
    _denied(hostile, "tcp_connect", errno.EACCES)


@pytest.mark.parametrize("call", ["setsid", "setpgid", "ptrace", "unset_subreaper", "unshare",
                                  "signal_everyone"])
def test_it_cannot_leave_its_tree_or_reach_other_processes(hostile: dict[str, Any],
                                                           call: str) -> None:
    _require("seccomp")
    _denied(hostile, call, errno.EPERM)


@pytest.mark.parametrize("call", ["chmod_outside", "chown_outside", "setxattr", "mount"])
def test_it_cannot_use_root_privileges_landlock_leaves_alone(hostile: dict[str, Any],
                                                             call: str) -> None:
    _require("seccomp")
    _denied(hostile, call, errno.EPERM)
    assert (hostile["outside"] / "existing.txt").stat().st_mode & 0o777 != 0o777


def test_it_cannot_signal_the_process_that_started_it(hostile: dict[str, Any]) -> None:
    _require("landlock_signals")
    _denied(hostile, "signal_parent", errno.EPERM)


def test_threads_still_work(hostile: dict[str, Any]) -> None:
    assert _allowed(hostile, "thread") == 45


def test_the_spawner_sees_the_confinement_from_outside(tmp_path: Path) -> None:
    _require("seccomp")
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent('''
        import sys
        from pathlib import Path
        from autokernel.harness.sandbox import apply_candidate_sandbox
        apply_candidate_sandbox(Path(sys.argv[1]), [], [], "cpu")
        print("applied", flush=True)
        sys.stdin.read()
    '''), str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "applied"
        seen = observed_confinement(child.pid)
        assert seen["no_new_privs"] == "1" and seen["seccomp"] == "2", seen
        assert int(seen.get("seccomp_filters", "1")) >= 1
    finally:
        child.kill()
        child.wait(timeout=10)


# -- what a sandboxed candidate still can do -------------------------------------------------------

def test_torch_and_the_triton_interpreter_work_inside(tmp_path: Path) -> None:
    done = _python(textwrap.dedent('''
        import json, sys
        from pathlib import Path
        from autokernel.harness.sandbox import apply_candidate_sandbox
        state = apply_candidate_sandbox(Path(sys.argv[1]), [Path(sys.argv[2])], [], "cpu")
        import torch  # imported inside the sandbox: reads stay allowed
        from autokernel.selfcheck import probe_inputs, scaled_add
        x, y, alpha = probe_inputs()
        error = (scaled_add(x, y, alpha) - (x * alpha + y)).abs().max().item()
        print(json.dumps({"state": state.to_dict(), "error": error}))
    '''), str(tmp_path / "work"), str(tmp_path / "cache"),
        env={"TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    report = _last_json(done)
    assert report["error"] <= 1e-6
    assert "landlock_fs" in report["state"]["applied"] or not CAPABILITIES["landlock_fs"].available


DOUBLE_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(x_ptr + offsets, x * 2, mask=offsets < n)
'''


def test_triton_runs_its_ptxas_inside(tmp_path: Path) -> None:
    """A real compile for sm_90: Triton execs its bundled ptxas (through ld.so) and writes its
    cache, while any other program stays forbidden."""
    _require("landlock_fs", "seccomp")
    if not toolchain_executables():
        pytest.skip("this Triton ships no ptxas")
    (tmp_path / "double.py").write_text(DOUBLE_KERNEL)  # @triton.jit needs a source file
    work, cache = tmp_path / "work", tmp_path / "cache"
    done = _python(textwrap.dedent('''
        import json, os, subprocess, sys
        from pathlib import Path
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from autokernel.harness.sandbox import apply_candidate_sandbox, toolchain_executables
        sys.path.insert(0, sys.argv[3])
        from double import double
        state = apply_candidate_sandbox(Path(sys.argv[1]), [Path(sys.argv[2])],
                                        toolchain_executables(), "cuda")
        source = ASTSource(double, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                           {"BLOCK": 128})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
        try:
            subprocess.run(["/bin/true"])
            other = "ran"
        except PermissionError:
            other = "denied"
        print(json.dumps({"cubin": len(compiled.asm["cubin"]), "other": other,
                          "cached": sorted(os.listdir(sys.argv[2])),
                          "state": state.to_dict()}))
    '''), str(work), str(cache), str(tmp_path),
        env={"TRITON_CACHE_DIR": str(cache), "TMPDIR": str(work)})
    report = _last_json(done)
    assert report["cubin"] > 0
    assert report["cached"], "nothing written to the Triton cache"
    assert report["other"] == "denied"
    assert "ptxas" in report["state"]["applied"]["landlock_fs"]


# -- the spawner's side: the whole tree dies -------------------------------------------------------

def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2:][:1] in (b"Z", b"X")


def _wait_dead(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(_dead(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if not _dead(p)]


# The root (an unsandboxed candidate) starts a child that calls setsid, starts the grandchild and
# exits: the grandchild has left the root's session and process group, and its parent is gone.
ESCAPE = r'''
import os, subprocess, sys
clean_env = sys.argv[1] == "clean"
middle = subprocess.run([sys.executable, "-c", """
import os, subprocess, sys
os.setsid()
cmd = ["/usr/bin/env", "-i", "sleep", "600"] if sys.argv[1] == "clean" else ["sleep", "600"]
print(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL).pid)
""", sys.argv[1]], capture_output=True, text=True, check=True)
print(middle.stdout.strip(), flush=True)
if sys.argv[2] == "stay":
    sys.stdin.read()  # alive until the spawner sweeps
'''


def _spawn_root(*args: str, marker: str | None = None,
                subreaper: bool = True) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ)
    if marker:
        env[TREE_MARKER_ENV] = marker
    root = subprocess.Popen([sys.executable, "-c", ESCAPE, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=become_subreaper if subreaper else None)
    assert root.stdout is not None
    grandchild = int(root.stdout.readline())
    return root, grandchild


def test_a_setsid_grandchild_is_killed_with_its_living_root() -> None:
    _require("subreaper", "tree_sweep")
    root, grandchild = _spawn_root("clean", "stay")  # no marker, clean environment
    try:
        assert not _dead(grandchild)
        assert grandchild in tree_members(root.pid)  # re-parented to the subreaper root
        killed = kill_process_tree(root.pid)
        assert {root.pid, grandchild} <= killed
        assert _wait_dead([grandchild]) == []
        assert root.wait(timeout=10) == -signal.SIGKILL
    finally:
        _cleanup(root, grandchild)


def test_a_setsid_grandchild_is_killed_after_its_root_exited() -> None:
    _require("tree_sweep")
    marker = new_tree_marker()
    root, grandchild = _spawn_root("inherit", "exit", marker=marker, subreaper=False)
    try:
        assert wait_unreaped(root.pid, timeout_s=60)  # exited, not yet reaped
        assert not _dead(grandchild)
        assert grandchild in kill_process_tree(root.pid, marker)
        assert _wait_dead([grandchild]) == []
        assert root.wait(timeout=10) == 0
    finally:
        _cleanup(root, grandchild)


def test_a_forking_tree_is_frozen_then_killed() -> None:
    """A tree that keeps forking while it is swept leaves nothing behind."""
    _require("tree_sweep")
    marker = new_tree_marker()
    env = {**os.environ, TREE_MARKER_ENV: marker}
    spawner = subprocess.Popen([sys.executable, "-c", textwrap.dedent('''
        import subprocess, time
        children = []
        while True:
            children.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
            time.sleep(0.005)
    ''')], env=env, start_new_session=True)
    try:
        time.sleep(1.0)
        killed = kill_process_tree(spawner.pid, marker)
        assert len(killed) > 5
        assert _wait_dead(sorted(killed - {spawner.pid})) == []
        assert spawner.wait(timeout=10) == -signal.SIGKILL
        assert [p for p in tree_members(spawner.pid, marker) if not _dead(p)] == []
    finally:
        _cleanup(spawner)


def test_wait_unreaped_leaves_the_pid_reserved_for_the_sweep() -> None:
    quick = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    slow = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        assert wait_unreaped(quick.pid, timeout_s=60) is True
        assert _dead(quick.pid) and os.path.exists(f"/proc/{quick.pid}")  # a zombie, unreaped
        assert wait_unreaped(slow.pid, timeout_s=0.2) is False
        assert kill_process_tree(slow.pid) == {slow.pid}
        assert wait_unreaped(slow.pid, timeout_s=10) is True
        assert quick.wait(timeout=10) == 0 and slow.wait(timeout=10) == -signal.SIGKILL
    finally:
        _cleanup(slow)


def test_the_sweep_never_kills_its_caller() -> None:
    assert os.getpid() not in tree_members(os.getpid())
    assert os.getppid() not in tree_members(os.getpgid(0))


def _cleanup(root: subprocess.Popen[str] | subprocess.Popen[bytes], *pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if root.poll() is None:
        root.kill()
    root.wait(timeout=10)


# -- the API's contract ----------------------------------------------------------------------------

def test_apply_is_importable_without_torch() -> None:
    done = _python("import sys, autokernel.harness.sandbox; print('torch' in sys.modules)")
    assert done.stdout.strip() == "False", done.stderr


# -- Triton's toolchain and torch.multiprocessing, inside ------------------------------------------

def test_triton_builds_a_launcher_inside(tmp_path: Path) -> None:
    """Triton builds each kernel signature's launcher with the C compiler (gcc: cc1, as, collect2,
    ld) at first launch, through `compile_module_from_src`: the same path, with a module that
    needs no libcuda."""
    _require("landlock_fs", "seccomp")
    if not any(p.name.startswith(("gcc", "x86_64-linux-gnu-gcc", "clang", "cc"))
               for p in toolchain_executables()):
        pytest.skip("no C compiler here")
    work, cache = tmp_path / "work", tmp_path / "cache"
    done = _python(textwrap.dedent('''
        import json, sys
        from pathlib import Path
        from triton.runtime.build import compile_module_from_src
        from autokernel.harness.sandbox import apply_candidate_sandbox, toolchain_executables
        state = apply_candidate_sandbox(Path(sys.argv[1]), [Path(sys.argv[2])],
                                        toolchain_executables(), "cuda")
        source = """
        #include <Python.h>
        static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "launcher_probe", NULL, -1};
        PyMODINIT_FUNC PyInit_launcher_probe(void) {
            PyObject *module = PyModule_Create(&probe);
            PyModule_AddIntConstant(module, "answer", 42);
            return module;
        }
        """
        module = compile_module_from_src(source, "launcher_probe")
        print(json.dumps({"answer": module.answer, "state": state.to_dict()}))
    '''), str(work), str(cache), env={"TRITON_CACHE_DIR": str(cache), "TMPDIR": str(work)})
    report = _last_json(done)
    assert report["answer"] == 42
    assert "cc1" in report["state"]["applied"]["landlock_fs"]


def _wrapper_compiler(tmp_path: Path, shebang: str) -> Path:
    """A compiler wrapper script, as some installs ship gcc (`exec the-real-gcc "$@"`)."""
    real = shutil.which("gcc") or shutil.which("clang")
    if real is None:
        pytest.skip("no C compiler here")
    wrapper = tmp_path / "bin" / "gcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'{shebang}\nexec {Path(real).resolve()} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("shebang", ["#!/bin/sh", "#!/usr/bin/env sh"])
def test_a_wrapper_script_brings_its_interpreter_and_its_program(tmp_path: Path,
                                                                 shebang: str) -> None:
    wrapper = _wrapper_compiler(tmp_path, shebang)
    closure = program_closure(wrapper)
    names = {p.name for p in closure}
    shell = Path(shutil.which("sh") or "/bin/sh").resolve()
    assert closure[0] == wrapper and shell in closure, closure
    assert Path(shutil.which("gcc") or shutil.which("clang") or "").resolve() in closure
    assert any(n.startswith("ld-linux") for n in names), names  # the ELF programs' loader
    assert program_closure(Path(sys.executable).resolve())[1:] == [
        elf_interpreter(Path(sys.executable).resolve())]


@pytest.mark.parametrize("flags", ["", "-B{libexec}/ -isystem /usr/include"])
def test_the_compiler_behind_a_wrapper_replaces_it_so_no_shell_runs_inside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str) -> None:
    """The candidate process compiles with the program a one-line wrapper script runs, its -B
    and -isystem flags as environment variables (tried once), so the toolchain it may execute
    holds no shell."""
    real = Path(shutil.which("gcc") or "").resolve()
    if "gcc" not in real.name:
        pytest.skip("needs gcc")
    libexec = Path(subprocess.run([str(real), "-print-prog-name=cc1"], capture_output=True,
                                  text=True, check=False).stdout.strip()).parent
    wrapper = tmp_path / "bin" / "gcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real} {flags.format(libexec=libexec)} "$@"\n')
    wrapper.chmod(0o755)

    def allowed() -> set[Path]:  # what apply_candidate_sandbox lets run: each tool's closure
        return {p for tool in toolchain_executables("cuda") for p in program_closure(tool)}

    monkeypatch.setenv("CC", str(wrapper))
    shell = Path("/bin/sh").resolve()
    assert shell in allowed()  # the wrapper as the compiler needs its shell
    found = unwrapped_c_compiler()
    assert found is not None and Path(found[0]).resolve() == real
    from autokernel.harness.spawn import candidate_env

    worker_env = candidate_env("cuda", tmp_path, tmp_path / "cache")  # what a GPU worker gets
    assert worker_env["CC"] == found[0]
    if flags:
        assert worker_env["COMPILER_PATH"] == found[1]["COMPILER_PATH"]
        assert found[1]["COMPILER_PATH"].split(os.pathsep)[0] == f"{libexec}/"
        assert found[1]["C_INCLUDE_PATH"].split(os.pathsep)[0] == "/usr/include"
    else:
        assert found[1] == {}
    monkeypatch.setenv("CC", found[0])
    assert shell not in allowed()
    monkeypatch.setenv("CC", str(real))
    assert unwrapped_c_compiler() is None  # not a script: nothing to unwrap
    wrapper.write_text(f'#!/bin/sh\nexec {real} -fsomething "$@"\n')
    monkeypatch.setenv("CC", str(wrapper))
    assert unwrapped_c_compiler() is None  # a flag no variable stands for: keep the wrapper


PROBE_INSIDE = """
import json, sys
from pathlib import Path
from autokernel.harness import sandbox
work = Path(sys.argv[1])
tools = sandbox.toolchain_executables("cuda") if sys.argv[2] == "toolchain" else []
state = sandbox.apply_candidate_sandbox(work, [], tools, "cpu")
print(json.dumps({"blocked": sandbox.toolchain_probe(work), "state": state.to_dict()}))
"""


@pytest.mark.parametrize("allowed", ["toolchain", "nothing"])
def test_a_wrapper_script_compiler_runs_inside_only_when_allowed(tmp_path: Path,
                                                                 allowed: str) -> None:
    """CC a wrapper script: the toolchain list allows what it runs, and the probe the worker
    runs after confining itself says plainly when the compiler cannot run."""
    _require("landlock_fs", "seccomp")
    wrapper = _wrapper_compiler(tmp_path, "#!/bin/sh")
    work = tmp_path / "work"
    report = _last_json(_python(PROBE_INSIDE, str(work), allowed, env={"CC": str(wrapper)}))
    if allowed == "toolchain":
        assert report["blocked"] is None, report
        assert "landlock_fs" in report["state"]["applied"]
    else:
        assert report["blocked"] and str(wrapper) in report["blocked"], report


def test_doctor_says_whether_the_compiler_runs_inside() -> None:
    _require("landlock_fs")
    works, detail = toolchain_check()
    assert works, detail
    assert "inside" in detail


# The judge side: an ordinary process sends a tensor to a sandboxed candidate through
# torch.multiprocessing and gets the candidate's result back.
JUDGE = r'''
import json, sys
import torch
import torch.multiprocessing as mp
sys.path.insert(0, sys.argv[1])
from candidate_side import serve

if __name__ == "__main__":
    device, work, writable = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    candidate = context.Process(target=serve, args=(device, work, writable, inbox, outbox))
    candidate.start()
    x = torch.arange(4096, dtype=torch.float32, device=device)
    inbox.put(x)
    state, y = outbox.get(timeout=240)
    right = bool(torch.equal(y, x * 2))
    del y
    inbox.put(None)  # the candidate may exit: the judge is done with its memory
    candidate.join(60)
    print(json.dumps({"right": right, "state": state, "exitcode": candidate.exitcode}))
'''

CANDIDATE_SIDE = r'''
from pathlib import Path


def serve(device, work, writable, inbox, outbox):
    import torch
    from autokernel.harness import sandbox
    if device == "cuda":
        torch.cuda.init()
        sandbox.warm_triton_driver(device)
    state = sandbox.apply_candidate_sandbox(Path(work), [Path(p) for p in writable],
                                            sandbox.toolchain_executables(device), device)
    x = inbox.get()
    outbox.put((state.to_dict(), x * 2))
    inbox.get()
'''


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_tensors_cross_to_a_sandboxed_process(tmp_path: Path, device: str) -> None:
    """torch.multiprocessing still works into and out of the sandbox, /dev/shm writable (its
    shared memory lives there)."""
    _require("landlock_fs", "seccomp")
    if device == "cuda" and not _cuda():
        pytest.skip("no GPU")
    (tmp_path / "candidate_side.py").write_text(CANDIDATE_SIDE)
    # TMPDIR holds multiprocessing's socket for passing file descriptors, whose path must fit a
    # unix socket's 108 bytes: pytest-xdist's tmp_path is long enough to hang the transfer.
    work = Path(tempfile.mkdtemp(prefix="ak-"))
    writable = [str(tmp_path / "cache"), "/dev/shm"]
    try:
        done = _python(JUDGE, str(tmp_path), device, str(work), json.dumps(writable),
                       env={"TRITON_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(work)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = _last_json(done)
    assert report["right"] is True
    assert report["exitcode"] == 0
    assert "landlock_fs" in report["state"]["applied"] and "seccomp" in report["state"]["applied"]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
def test_a_triton_kernel_compiles_and_launches_on_the_gpu_inside(tmp_path: Path) -> None:
    """On a GPU: CUDA initialised, then the sandbox, then a kernel's first launch (ptxas, the
    launcher's gcc build, the fresh Triton cache) and its result; other programs, network sockets
    and writes elsewhere stay forbidden."""
    if not _cuda():
        pytest.skip("no GPU")
    _require("landlock_fs", "seccomp")
    (tmp_path / "double.py").write_text(DOUBLE_KERNEL)
    work, cache = tmp_path / "work", tmp_path / "cache"
    done = _python(textwrap.dedent('''
        import json, socket, subprocess, sys
        from pathlib import Path
        import torch
        from autokernel.harness import sandbox
        sys.path.insert(0, sys.argv[3])
        from double import double
        torch.cuda.init()
        x = torch.arange(1000, dtype=torch.float32, device="cuda")
        sandbox.warm_triton_driver("cuda")
        state = sandbox.apply_candidate_sandbox(Path(sys.argv[1]), [Path(sys.argv[2])],
                                                sandbox.toolchain_executables(), "cuda")
        expected = x * 2
        double[(8,)](x, x.numel(), BLOCK=128)
        torch.cuda.synchronize()
        denied = {}
        for name, action in (("exec", lambda: subprocess.run(["/bin/true"])),
                             ("inet", lambda: socket.socket(socket.AF_INET)),
                             ("write", lambda: open(sys.argv[4], "w"))):
            try:
                action()
                denied[name] = False
            except OSError:
                denied[name] = True
        print(json.dumps({"right": bool(torch.equal(x, expected)), "denied": denied,
                          "state": state.to_dict()}))
    '''), str(work), str(cache), str(tmp_path), str(tmp_path / "outside.txt"),
        env={"TRITON_CACHE_DIR": str(cache), "TMPDIR": str(work), "HOME": str(work)})
    report = _last_json(done)
    assert report["right"] is True, report
    assert report["denied"] == {"exec": True, "inet": True, "write": True}, report
    assert not (tmp_path / "outside.txt").exists()


def test_the_c_compilers_own_libraries_are_readable_in_the_sandbox() -> None:
    """A compiler outside /usr (/opt/gcc on the GPU machine) found no -lgcc inside the sandbox:
    its install and search directories are in the candidate's reads on a GPU."""
    from autokernel.harness.sandbox import candidate_readable
    from autokernel.harness.sandbox.compiler import toolchain_reads

    compiler = os.environ.get("CC") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here")
    libgcc = Path(subprocess.run([compiler, "-print-libgcc-file-name"], capture_output=True,
                                 text=True, check=True).stdout.strip()).resolve()
    assert any(libgcc.is_relative_to(d) for d in toolchain_reads()), (libgcc, toolchain_reads())
    readable = candidate_readable(Path("/tmp"), "cuda")
    assert any(libgcc.is_relative_to(d) for d in readable)
