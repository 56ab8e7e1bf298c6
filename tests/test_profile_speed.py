"""Profiling fast: the CPU reader (`cpu_record.py`) gives what the generic reader gives from torch's
FunctionEvents, and the CLI's progress line shows on a terminal only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autokernel.profiling.cpu_record import record_from_cpu
from autokernel.profiling.model_loader import call_forward, load_model_file
from autokernel.profiling.profiler import (SCOPE_PREFIX, describe_modules, module_scopes,
                                           record_from_events)
from autokernel.profiling.ranking import build_plan
from autokernel.profiling.recorder import GraphRecorder

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fixtures" / "models"


def _profiled(name: str) -> tuple[object, object]:
    """One profiled forward of a fixture model, with module scopes and graph call ranges."""
    from torch.autograd.profiler import profile

    loaded = load_model_file(MODELS / f"{name}.py", device="cpu")
    recorder = GraphRecorder(loaded.model, loaded.inputs)
    with torch.no_grad(), module_scopes(loaded.model):
        with profile(use_cpu=True, record_shapes=True, use_kineto=True) as prof:
            with recorder.forward(record=True):
                call_forward(loaded.model, loaded.inputs)
    return prof, describe_modules(loaded.model)


@pytest.mark.parametrize("name", ["minigpt_lambda", "swiglu"])
def test_the_cpu_reader_records_what_the_function_event_reader_does(name: str) -> None:
    prof, modules = _profiled(name)
    fast = record_from_cpu(prof.kineto_results, dtype="fp32", iterations=1, modules=modules,
                           scope_prefix=SCOPE_PREFIX)
    slow = record_from_events(prof.function_events, device="cpu", dtype="fp32", iterations=1,
                              modules=modules)
    assert len(fast.ops) > 20
    assert [(o.name, o.parent, o.scopes, o.shapes, o.args, o.node) for o in fast.ops.values()] == \
        [(o.name, o.parent, o.scopes, o.shapes, o.args, o.node) for o in slow.ops.values()]
    assert {c.id: c.path for c in fast.module_calls.values()} == \
        {c.id: c.path for c in slow.module_calls.values()}
    assert [(r.name, r.op) for r in fast.rows] == [(r.name, r.op) for r in slow.rows]
    assert [r.time_us for r in fast.rows] == pytest.approx([r.time_us for r in slow.rows],
                                                            abs=0.01)
    assert any(o.node is not None for o in fast.ops.values())
    assert any(o.scopes for o in fast.ops.values())


def test_the_cpu_reader_plans_what_the_function_event_reader_does() -> None:
    """torch's FunctionEvents merge an op into a same-named op it is the only child of (two
    nested aten::div_ in a mean); the CPU reader keeps both. The plans are the same."""
    prof, modules = _profiled("rmsnorm_handwritten")
    fast = record_from_cpu(prof.kineto_results, dtype="fp32", iterations=1, modules=modules,
                           scope_prefix=SCOPE_PREFIX)
    slow = record_from_events(prof.function_events, device="cpu", dtype="fp32", iterations=1,
                              modules=modules)
    plans = [build_plan(record, model="m", class_name="Model") for record in (fast, slow)]
    assert [(t.label, t.calls, t.bench_shape, t.params) for t in plans[0].targets] == \
        [(t.label, t.calls, t.bench_shape, t.params) for t in plans[1].targets]
    assert plans[0].targets[0].kernel_type == "rmsnorm"
    assert plans[0].total_ms == pytest.approx(plans[1].total_ms, rel=1e-6)


def test_profiling_tells_what_it_is_doing() -> None:
    """Each step reaches the progress callback: the forwards, the events read (a recurrent
    model's 100k take seconds), the classification, the routes asked."""
    from autokernel.profiling.session import profile_plan

    heard: list[str] = []
    loaded = load_model_file(MODELS / "swiglu.py", device="cpu")
    profile_plan(loaded, "swiglu", "Model", warmup=1, iters=2, progress=heard.append)
    assert heard[:3] == ["warm-up forward 1 of 1", "profiled forward 1 of 2",
                         "profiled forward 2 of 2"]
    assert heard[3].startswith("reading the profile: 0 of ")
    assert heard[-2:] == ["recognizing ops", "asking verify's routes which call sites they take"]


def test_the_progress_line_is_quiet_when_piped() -> None:
    from typer.testing import CliRunner

    from autokernel.cli import app

    result = CliRunner().invoke(app, ["profile", str(MODELS / "swiglu.py"), "--device", "cpu",
                                      "--warmup", "0", "--iters", "1"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the title wraps
    assert "fused_mlp" in text and "ranked by eager share" in text
    assert "recognizing ops" not in text and "reading the profile" not in text


@pytest.mark.parametrize("argv, message", [
    (["--rank-by", "fastest"], "--rank-by must be eager or compile"),
    (["--rank-by", "compile", "--no-compiled"], "--rank-by compile needs the compiled profile"),
])
def test_rank_by_options(argv: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from autokernel.cli import app

    result = CliRunner().invoke(app, ["profile", str(MODELS / "swiglu.py"), "--device", "cpu",
                                      *argv])
    assert result.exit_code == 2
    assert message in result.output


# ---------------------------------------------------------------------------------------------
# Budgets (issue 28): what profiling costs beyond the model's own forwards.

KERNELBENCH = REPO / "tests" / "fixtures" / "kernelbench"
# `autokernel profile` in a fresh interpreter, timed past `import torch` (2-3 s on a 2-core CI
# machine, before autokernel runs at all): the CLI's imports, loading, the warm-up and profiled
# forwards of a one-op model, reading, recognizing, asking verify's routes, printing the table.
CLI_PAST_TORCH = """
import sys, time
import torch
start = time.perf_counter()
from autokernel.cli import app
try:
    app(["profile", sys.argv[1], "--device", "cpu"], prog_name="autokernel")
except SystemExit as exit:
    assert not exit.code, exit.code
print(f"SECONDS PAST TORCH {time.perf_counter() - start:.3f}", file=sys.stderr)
"""
FIXED_COST_BUDGET_S = 3.0


def test_profiling_a_one_op_model_costs_under_three_seconds_past_torch() -> None:
    """~0.7 s on an idle 2-core machine (the whole command ~3.5 s, 2.7 of them `import torch`):
    a budget of 3 s leaves room for a busy CI machine, not for an import of torch._inductor
    or a compile slipping into the profile path."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CLI_PAST_TORCH,
                           str(KERNELBENCH / "l1_23_softmax.py")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "softmax" in done.stdout
    seconds = float(done.stderr.rsplit("SECONDS PAST TORCH ", 1)[1])
    assert seconds < FIXED_COST_BUDGET_S, done.stderr[-2000:]


GRU_BUDGET_S = 30.0


@pytest.mark.slow
def test_kernelbench_gru_profiles_within_its_budget() -> None:
    """KernelBench L3 39 at its real shapes (6 layers x 512 steps: 135k op calls in a forward)
    loaded and profiled as `autokernel profile` does, in ~8 s on an idle 2-core machine. On one
    thread: with two, each of the GRU's 3k small GEMMs meets an OpenMP barrier, and on a machine
    whose other core is busy (an xdist worker, a neighbour) the model's own forward alone was
    seen to take 1 s to 50 s; the budget is on the profiler, not on that. (L3 41, bidirectional,
    has twice the op calls: ~15 s.)"""
    import time

    from autokernel.profiling.session import profile_plan

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        loaded = load_model_file(KERNELBENCH / "l3_39_gru.py", device="cpu")
        record, plan = profile_plan(loaded, model="l3_39_gru", class_name="Model")
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    assert len(record.ops) > 100_000
    assert plan.targets and plan.targets[0].kernel_type == "matmul"  # the GRU's input linears
    assert seconds < GRU_BUDGET_S
