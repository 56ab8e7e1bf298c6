"""A real finished run, made once per test session for the verify, report and export tests.

`autokernel run` on examples/models/tiny_llama.py with `--device cpu`: the real profiler, loop,
harness and tuner agent, in the Triton interpreter, on the model's five targets (its baseline and
one tuner experiment each). Each test gets its own copy of the workspace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_LLAMA = REPO / "examples" / "models" / "tiny_llama.py"
# Tiny LLaMA (2 layers): kernel calls per forward once every target is spliced in. The MLPs'
# Linears run inside fused_mlp; matmul takes q/k/v/o of both layers and the output head;
# add_rmsnorm the four norms that take a residual add's result (the first layer's attn_norm, of
# the embedding, is a sixth target, rmsnorm, past --top 5).
EXPECTED_CALLS = {"matmul": 9, "fused_mlp": 2, "flash_attention": 2, "rotary_embedding": 2,
                  "add_rmsnorm": 4}
FUNCTIONAL = {"flash_attention"}  # routed in the attention modules, not as modules
# Routed in the outermost of the modules where the profiler found them (a deferred add reaches
# its norm across a block boundary), by taps on the norm modules inside.
DEFERRED_ADDS = {"add_rmsnorm"}
CLI_TIMEOUT_S = 900


def autokernel(*args: str, cwd: Path | None = None, timeout: float = CLI_TIMEOUT_S,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter (a cpu run sets TRITON_INTERPRET for its whole process)."""
    return subprocess.run([sys.executable, "-m", "autokernel", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


@dataclass(frozen=True)
class MadeRun:
    path: Path
    run_output: str  # what `autokernel run` printed


_MADE: dict[str, MadeRun] = {}


def make_run(base: Path) -> MadeRun:
    """Run the loop on every target of tiny LLaMA, two experiments each (once a session)."""
    if "run" in _MADE:
        return _MADE["run"]
    workspace = base / "run"
    done = autokernel("run", str(TINY_LLAMA), "--device", "cpu", "--agent", "tuner",
                      "--top", str(len(EXPECTED_CALLS)), "--max-experiments-per-target", "1",
                      # by type, not by rank: the CPU shares of add_rmsnorm and rmsnorm are
                      # close, and a busy machine reorders them
                      "--only", ",".join(EXPECTED_CALLS),
                      "--out", str(workspace), "--no-live")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    state = json.loads((workspace / "state.json").read_text())
    finished = {t["kernel_type"]: t["kernel_file"] for t in state["targets"]}
    assert set(finished) == set(EXPECTED_CALLS), f"the profiler's targets changed: {finished}"
    assert all(finished.values()), f"a starter failed the harness: {finished}"
    _MADE["run"] = MadeRun(workspace, done.stdout)
    return _MADE["run"]


def copy_run(made: MadeRun, destination: Path) -> Path:
    """A private copy of the workspace (tests write verify.json, reports, broken files)."""
    target = destination / "run"
    shutil.copytree(made.path, target, symlinks=True)
    return target


@pytest.fixture(scope="session")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> MadeRun:
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # no xdist: this process is the session
        return make_run(tmp_path_factory.mktemp("finished_run"))
    # Under xdist every worker is a session of its own: the first to ask makes the run (3 min of
    # CPU) under a lock in the directory the workers share, and the others read it back.
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / "finished_run"
    shared.mkdir(exist_ok=True)
    with FileLock(str(shared / "lock")):
        failed, printed = shared / "failed.txt", shared / "run_output.txt"
        if failed.exists():
            pytest.fail(f"the shared finished run failed in another worker: {failed.read_text()}")
        if printed.exists():
            return MadeRun(shared / "run", printed.read_text())
        try:
            made = make_run(shared)
        except BaseException as error:
            failed.write_text(str(error)[-4000:])
            raise
        printed.write_text(made.run_output)
        return made


@pytest.fixture
def run_dir(made_run: MadeRun, tmp_path: Path) -> Path:
    return copy_run(made_run, tmp_path)


def unfinish(run: Path) -> None:
    """Make the copy look like a run interrupted before any target finished."""
    state_path = run / "state.json"
    state = json.loads(state_path.read_text())
    for target in state["targets"]:
        target["status"], target["kernel_file"] = "active", None
    state["finished"] = False
    state_path.write_text(json.dumps(state))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single error line of a bad-input exit (and no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr[-1000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]
