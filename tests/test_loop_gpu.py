"""The loop on a real GPU: a short tuner run on the LLaMA-style model (skipped without CUDA).

What the CPU tests cannot show: timings that mean something (so the %-of-peak figures and the
torch.compile baseline are there), and the loop's speed. The 20-minute benchmark is
`python -m autokernel.benchmarks tuner-run`; this is the quick check that the pieces fit on a GPU.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.loop.results import read_rows
from autokernel.loop.state import RunState

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_short_tuner_run_on_the_gpu(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [sys.executable, "-m", "autokernel", "run", str(ROOT / "examples/models/llama.py"),
         "--device", "cuda", "--dtype", "fp16", "--agent", "tuner", "--only",
         "rmsnorm,rotary_embedding", "--top", "2", "--max-experiments-per-target", "6",
         "--out", str(run_dir), "--no-live"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    state = RunState.load(run_dir / "state.json")
    rows = read_rows(run_dir / "results.tsv")
    # Two baselines and up to six experiments each (the peak or speedup rule may end one early).
    assert state.finished and 4 <= len(rows) <= 14
    passing = [r for r in rows if r["correctness"] == "PASS"]
    assert passing, "no experiment passed on the GPU"
    for row in passing:  # GPU timings: every figure of the row is there
        for column in ("latency_us", "speedup_vs_pytorch", "speedup_vs_compile", "pct_peak",
                       "harness_seconds"):
            assert row[column], (column, row)
    for target in state.targets:
        assert target.timing_meaningful
        assert (run_dir / "kernels" / f"{target.tag}.py").is_file()
    # The loop's own overhead per experiment stays small next to the harness.
    overhead = [float(r["seconds"]) - float(r["harness_seconds"]) for r in rows
                if r["seconds"] and r["harness_seconds"]]
    assert statistics.median(overhead) < 1.0, overhead
    print(f"median harness seconds per experiment: "
          f"{statistics.median(float(r['harness_seconds']) for r in passing):.2f}")
