"""`autokernel run --backend triton|cuda|auto`: which starter begins each target, and auto's one
trial of the CUDA starter after the Triton baseline (kept only where it is faster)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from test_workspace import (
    SOFTMAX, STARTERS, FakeBench, assert_consistent, loop_config, make_plan, new_run,
)
from typer.testing import CliRunner

from autokernel.agents.tuner import TunerAgent
from autokernel.cli import app
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.runner import Runner
from autokernel.loop.state import RunState

# The fake harness times a file by its tunables: the starters' BLOCK_N 256 / 4 warps is 19 µs;
# 1024 / 8 warps is 10 µs (faster), 64 / 1 warp 28 µs (slower).
AS_CUDA = SOFTMAX.replace('BACKEND = "triton"', 'BACKEND = "cuda"\nCUDA_SOURCE = "// fake"')
FAST_CUDA = AS_CUDA.replace("BLOCK_N = 256", "BLOCK_N = 1024").replace("NUM_WARPS = 4",
                                                                     "NUM_WARPS = 8")
SLOW_CUDA = AS_CUDA.replace("BLOCK_N = 256", "BLOCK_N = 64").replace("NUM_WARPS = 4",
                                                                   "NUM_WARPS = 1")


def _run(tmp_path: Path, backend: str, device: str, cuda_starter: str | None,
         ) -> tuple[FakeBench, list[dict[str, str]], RunState, list[str]]:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    config = replace(loop_config(max_experiments=1, max_consecutive_reverts=None),
                     device=device, backend=backend)
    bench = FakeBench()
    log = tmp_path / "dashboard.log"
    with open(log, "w") as stream:
        runner = Runner(ws, plan, state, config, TunerAgent(seed=0), bench=bench,
                        dashboard=PlainDashboard(stream=stream),
                        starter_source=STARTERS.__getitem__,
                        cuda_starter_source=lambda kernel_type: cuda_starter)
        assert runner.run() == "every target is done"
    return bench, assert_consistent(ws, state), state, log.read_text().splitlines()


@pytest.mark.parametrize("cuda_starter, verdict", [(FAST_CUDA, "keep"), (SLOW_CUDA, "revert")])
def test_auto_tries_the_cuda_starter_once_after_the_triton_baseline(
        tmp_path: Path, cuda_starter: str, verdict: str) -> None:
    bench, rows, state, _ = _run(tmp_path, "auto", "cuda", cuda_starter)
    assert bench.calls[0]["source"] == SOFTMAX  # the Triton starter is the baseline
    assert bench.calls[1]["source"] == cuda_starter
    assert bench.calls[1]["incumbent"] is not None  # timed against the Triton kernel, paired
    trial = rows[1]
    assert trial["status"] == verdict and "CUDA starter (--backend auto" in trial["description"]
    assert trial["agent"] == "starter"
    assert state.targets[0].cuda_starter_tried
    assert sum("CUDA starter" in r["description"] for r in rows) == 1


def test_auto_on_the_cpu_and_triton_never_run_the_cuda_starter(tmp_path: Path) -> None:
    for device, backend in (("cpu", "auto"), ("cuda", "triton")):
        bench, rows, state, _ = _run(tmp_path / f"{device}-{backend}", backend, device,
                                     FAST_CUDA)
        assert all(call["source"] != FAST_CUDA for call in bench.calls)
        assert not state.targets[0].cuda_starter_tried


def test_cuda_starts_from_the_cuda_starter_or_says_it_has_none(tmp_path: Path) -> None:
    bench, rows, _, _ = _run(tmp_path / "has", "cuda", "cuda", FAST_CUDA)
    assert bench.calls[0]["source"] == FAST_CUDA
    assert rows[0]["status"] == "baseline" and "CUDA starter" in rows[0]["description"]
    bench, rows, _, log = _run(tmp_path / "none", "cuda", "cuda", None)
    assert bench.calls[0]["source"] == SOFTMAX
    assert any("no CUDA starter for softmax" in line for line in log)


def test_the_packaged_cuda_starters_are_found_by_type(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import autokernel.kernels
    from autokernel.loop.runner import _packaged_cuda_starter

    assert 'BACKEND = "cuda"' in (_packaged_cuda_starter("rmsnorm") or "")
    monkeypatch.setattr(autokernel.kernels, "CUDA_KERNELS_DIR", tmp_path)  # none at all
    assert _packaged_cuda_starter("rmsnorm") is None


def test_backend_cuda_on_the_cpu_is_refused_up_front(tmp_path: Path) -> None:
    model = Path(__file__).parent / "fixtures" / "models" / "softmax.py"
    result = CliRunner().invoke(app, ["run", str(model), "--device", "cpu", "--backend", "cuda",
                                      "--out", str(tmp_path / "run")],
                                env={**os.environ, "ANTHROPIC_API_KEY": ""})
    assert result.exit_code == 2
    assert "--backend cuda needs a GPU" in result.output
    assert not (tmp_path / "run").exists()
