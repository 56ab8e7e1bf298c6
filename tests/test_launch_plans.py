"""The starters' GPU launch path, checked on the CPU (tests/fake_gpu_launches.py runs it).

Each starter plans a launch once per key (shapes, strides, dtypes, device), compiles it ahead with
`JITFunction.warmup`, and launches through `CompiledKernel[grid]`, Triton's cheapest public path.
Under the interpreter (every other CPU test) that path is never taken, so here a child process
with real JITFunctions, a stand-in sm_90 driver and a code-less compile runs it, and checks:

- every launch's arguments specialize, by Triton's own binder, exactly as the kernel it went
  through was compiled (a cached kernel reused across specializations is wrong on a GPU);
- the same keys again compile nothing and never enter Triton's JIT (the plan is reused);
- a tensor at an odd address goes through the JIT, which specializes on it;
- the harness's launch monitor sees every launch of both paths, and ghost mode skips them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).resolve().parent / "fake_gpu_launches.py"
PLANNED = ("softmax", "rmsnorm", "layernorm", "cross_entropy", "rotary_embedding", "reduce",
           "fused_mlp", "flash_attention", "add_rmsnorm", "add_layernorm", "gelu")


@pytest.fixture(scope="module")
def report() -> dict[str, dict]:
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, str(CHILD), *PLANNED], env=env, capture_output=True,
                          text=True, timeout=600, cwd=CHILD.parents[1], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel_type", PLANNED)
def test_compiled_launches_match_their_arguments(report, kernel_type: str) -> None:
    found = report[kernel_type]
    assert found["launches"] > 0
    assert found["problems"] == []


@pytest.mark.parametrize("kernel_type", PLANNED)
def test_a_planned_key_is_reused(report, kernel_type: str) -> None:
    found = report[kernel_type]
    assert found["repeat_compiles"] == 0
    assert found["repeat_jit_runs"] == 0  # neither a warm-up nor a JIT launch


@pytest.mark.parametrize("kernel_type", PLANNED)
def test_misaligned_tensors_take_the_jit(report, kernel_type: str) -> None:
    found = report[kernel_type]
    assert found["misaligned_jit_launches"] >= found["misaligned_calls"] > 0


@pytest.mark.parametrize("kernel_type", PLANNED)
def test_ghost_replay_skips_every_launch(report, kernel_type: str) -> None:
    found = report[kernel_type]
    assert found["ghost_monitored_launches"] >= found["ghost_calls"] > 0
    assert found["ghost_launches_run"] == 0


class _WithoutWarmup:
    """A kernel offering only `kernel[grid](...)`, as a Triton without `warmup` would."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def test_a_kernel_without_warmup_is_launched_through_the_jit(device, tmp_path: Path,
                                                             monkeypatch) -> None:
    import torch
    from starter_checks import assert_matches_reference, load_starter_with, seeded_inputs

    from autokernel.ops import get_spec

    spec = get_spec("rmsnorm")
    module = load_starter_with("rmsnorm", {"VARIANT": "single_pass"}, tmp_path)
    plain = _WithoutWarmup(module.rmsnorm_single_pass_kernel)
    monkeypatch.setattr(module, "rmsnorm_single_pass_kernel", plain)
    for seed in (0, 1):
        args = seeded_inputs(spec, (5, 40), torch.float16, device, seed=seed)
        assert_matches_reference(spec, module.kernel_fn, args, f"seed {seed}")
    assert plain.launches == 2
