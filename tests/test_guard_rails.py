"""Issue 29: guard rails before a wasted night. The device picked without --device is said with
its reason; a GPU-sized model on the CPU gets an estimate and is refused without --yes before
any experiment; resuming a finished run says how to give it more time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_workspace import FakeBench, loop_config, new_run, runner_for
from typer.testing import CliRunner

from autokernel.agents.tuner import TunerAgent
from autokernel.loop.cpu_estimate import HANDFUL, estimate
from autokernel.loop.workspace import RUN_FILE
from autokernel.profiling.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
GPU_SIZED = ROOT / "docs" / "profiles" / "llama_7b_layers.json"  # profiled on an H200


def test_a_gpu_sized_model_on_the_cpu_is_estimated_too_slow_and_a_tiny_one_is_not() -> None:
    from test_workspace import make_plan

    big = Plan.load(GPU_SIZED)
    night = estimate(big, [0, 1, 2], hours=8.0, timeout_s=300.0)
    assert night.times_out and night.too_slow
    assert "would time out" in night.warning() and "x" in night.warning()
    tiny = estimate(make_plan(), [0, 1], hours=0.05, timeout_s=300.0)
    assert not tiny.too_slow and tiny.warning() == "" and tiny.experiments >= HANDFUL
    short = estimate(make_plan(), [0, 1], hours=0.01, timeout_s=300.0)
    assert short.too_slow and "would finish about" in short.warning()


def test_run_refuses_a_gpu_sized_model_on_the_cpu_before_any_experiment(tmp_path: Path) -> None:
    model = ROOT / "examples" / "models" / "llama_7b_layers.py"
    done = subprocess.run(
        [sys.executable, "-m", "autokernel", "run", str(model), "--plan", str(GPU_SIZED),
         "--device", "cpu", "--agent", "tuner", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: on the CPU one experiment on "), lines
    assert "--yes" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # refused before any workspace or experiment


def test_without_device_the_choice_is_said_with_its_reason(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import autokernel.device as device
    from autokernel.cli._common import device_or_fail

    monkeypatch.setattr(device, "cuda_available", lambda: False)
    assert device_or_fail(None) == "cpu"
    said = capsys.readouterr().err
    assert said.startswith("device: cpu, since torch sees no CUDA GPU") and "interpreter" in said
    device_or_fail("cpu")
    assert capsys.readouterr().err == ""  # asked for: nothing to explain


def test_resuming_a_finished_run_says_how_to_give_it_more_time(tmp_path: Path) -> None:
    from autokernel.cli import app

    ws, state, plan = new_run(tmp_path, hours=0.5)
    runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
               loop_config(max_experiments=1)).run()
    assert state.finished
    info = json.loads((ws.root / RUN_FILE).read_text())
    info["config"] = loop_config().to_dict()
    (ws.root / RUN_FILE).write_text(json.dumps(info))
    cli = CliRunner()
    done = cli.invoke(app, ["resume", str(ws.root)])
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "is finished" in text and f"autokernel resume {ws.root} --hours 1" in text
    refused = cli.invoke(app, ["resume", str(ws.root), "--hours", "0.00001"])
    assert refused.exit_code == 2 and "is not more than the" in refused.output
