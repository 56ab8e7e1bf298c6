"""`autokernel kernelbench`: fast_p, problem discovery, the per-problem isolation, the command end
to end on the CPU interpreter, and the shipped problem files and example models."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.kernelbench.problem import (
    CRASHED,
    DONE,
    ERROR,
    INTERRUPTED,
    NO_TARGET,
    TIMEOUT,
    ProblemJob,
    fill_from_verify,
    new_record,
)
from autokernel.kernelbench.scoring import fast_p, fast_p_table, is_fast
from autokernel.kernelbench.suite import (
    SuiteError, discover_problems, finished_records, problem_names, run_one,
)
from autokernel.kernelbench.table import optimized_cell, target_summary, write_tables

ROOT = Path(__file__).resolve().parents[1]
TINY_PROBLEMS = ROOT / "tests" / "fixtures" / "kernelbench_tiny"
PROBLEMS = ROOT / "examples" / "kernelbench"
MODELS = ROOT / "examples" / "models"


# ---------------------------------------------------------------------------------------------
# fast_p


@pytest.mark.parametrize("outcomes, p, expected", [
    ([], 0.0, None),  # no problems: undefined, not 0
    ([(False, 5.0), (False, None)], 0.0, 0.0),  # fast and wrong is not fast
    ([(True, 0.5), (True, 3.0), (False, 9.0), (True, None)], 0.0, 3 / 4),  # fast_0: correct
    ([(True, 0.5), (True, 3.0), (False, 9.0), (True, None)], 1.0, 1 / 4),
    ([(True, 0.5), (True, 3.0), (False, 9.0), (True, None)], 2.0, 1 / 4),
    ([(True, 1.0), (True, 2.0)], 1.0, 1 / 2),  # strictly greater: exactly 1x is not faster
    ([(True, 1.0), (True, 2.0)], 2.0, 0.0),
    ([(True, math.nan), (True, math.inf)], 1.0, 1 / 2),  # a NaN speedup is never fast
    ([(True, None)], 1.0, 0.0),  # correct but unmeasured: not fast for p > 0
    ([(True, None)], 0.0, 1.0),  # ... but correct, so it counts for fast_0
    ([(True, 1.5)] * 3, 1.0, 1.0),
])
def test_fast_p(outcomes: list[tuple[bool, float | None]], p: float,
                expected: float | None) -> None:
    assert fast_p(outcomes, p) == expected


@pytest.mark.parametrize("p", [-0.5, math.nan])
def test_fast_p_refuses_a_negative_or_nan_threshold(p: float) -> None:
    with pytest.raises(ValueError):
        fast_p([(True, 1.0)], p)


def test_fast_p_is_monotone_in_p() -> None:
    outcomes = [(i % 3 != 0, 0.25 * i) for i in range(12)]
    values = [fast_p(outcomes, p) for p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)]
    assert values == sorted(values, reverse=True)
    assert is_fast((True, 2.5), 2.0) and not is_fast((True, 2.0), 2.0)


def test_fast_p_table_per_baseline() -> None:
    records = [
        {"correct": True, "speedup_vs_eager": 2.5, "speedup_vs_compile": 1.2},
        {"correct": True, "speedup_vs_eager": 0.9, "speedup_vs_compile": 0.5},
        {"correct": False, "speedup_vs_eager": 3.0, "speedup_vs_compile": None},
        {"correct": False, "speedup_vs_eager": None, "speedup_vs_compile": None},
    ]
    table = fast_p_table(records)
    assert table["eager"] == {"fast_0": 0.5, "fast_1": 0.25, "fast_2": 0.25, "measured": 3,
                              "problems": 4}
    assert table["compile"] == {"fast_0": 0.5, "fast_1": 0.25, "fast_2": 0.0, "measured": 2,
                                "problems": 4}


def test_fast_p_table_leaves_an_unmeasured_baseline_undefined() -> None:
    """No torch.compile timing at all (the CPU): fast_1 vs compile is unknown, not 0."""
    records = [{"correct": True, "speedup_vs_eager": 1.5, "speedup_vs_compile": None}]
    table = fast_p_table(records)
    assert table["compile"]["fast_0"] == 1.0
    assert table["compile"]["fast_1"] is None and table["compile"]["fast_2"] is None
    assert table["eager"]["fast_1"] == 1.0


# ---------------------------------------------------------------------------------------------
# Problems, names, table cells


def test_discover_problems(tmp_path: Path) -> None:
    for name in ("b.py", "a.py", "_helper.py", "notes.txt"):
        (tmp_path / name).write_text("")
    single = tmp_path / "sub" / "c.py"
    single.parent.mkdir()
    single.write_text("")
    found = discover_problems([tmp_path, single])
    assert [p.name for p in found] == ["a.py", "b.py", "c.py"]
    with pytest.raises(SuiteError, match="no such problem"):
        discover_problems([tmp_path / "missing.py"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SuiteError, match="no problem files"):
        discover_problems([empty])


def test_problem_names_are_unique() -> None:
    paths = [Path("x/softmax.py"), Path("y/softmax.py"), Path("matmul.py"), Path("z/softmax.py")]
    assert problem_names(paths) == ["softmax", "softmax-2", "matmul", "softmax-3"]


def _target(**overrides: object) -> dict:
    target = {"kernel_type": "softmax", "status": "done", "kernel": True,
              "speedup_vs_eager": 1.84, "spliced": True, "calls_per_forward": 2}
    target.update(overrides)
    return target


@pytest.mark.parametrize("overrides, verified, expected", [
    ({}, True, "softmax 1.84× eager, 2 calls/fwd"),
    ({"calls_per_forward": 0}, True, "softmax 1.84× eager, not routed"),
    ({"spliced": False, "calls_per_forward": None}, True,
     "softmax 1.84× eager, left out (slower than eager)"),
    ({}, False, "softmax 1.84× eager"),
    ({"kernel": False}, True, "softmax: no passing kernel"),
    ({"kernel": False, "status": "pending"}, False, "softmax: not reached"),
    ({"speedup_vs_eager": 0.00024}, False, "softmax 0.00024× eager"),
])
def test_target_summary(overrides: dict, verified: bool, expected: str) -> None:
    assert target_summary(_target(**overrides), verified) == expected


def test_optimized_cell_says_when_there_is_nothing_to_optimize() -> None:
    assert optimized_cell({"status": NO_TARGET, "targets": []}) == "no optimizable target"
    cell = optimized_cell({"status": DONE, "targets": [_target(), _target(kernel_type="matmul",
                                                                           kernel=False)]})
    assert cell == "softmax 1.84× eager, 2 calls/fwd; matmul: no passing kernel"


# ---------------------------------------------------------------------------------------------
# One problem in its own process: a crash or a hang is a row, not the end of the set


def _job(tmp_path: Path, problem: Path) -> ProblemJob:
    return ProblemJob(problem=str(problem), workspace=str(tmp_path / "ws"),
                      result_path=str(tmp_path / "result.json"), device="cpu", dtype="fp32",
                      minutes=0.1, agent="tuner")


def _problem_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "problem.py"
    path.write_text(textwrap.dedent(f"""\
        import os, time
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                return x * 2

        def get_inputs():
            {body}
            return [torch.randn(4, 4)]
        """))
    return path


@pytest.mark.parametrize("body, limit_s, status, words", [
    ("os._exit(3)", 120.0, CRASHED, "exit status 3"),
    ("time.sleep(600)", 6.0, TIMEOUT, "hard limit"),
])
def test_a_crashing_or_hanging_problem_is_one_row(tmp_path: Path, body: str, limit_s: float,
                                                  status: str, words: str) -> None:
    job = _job(tmp_path, _problem_file(tmp_path, body))
    record = run_one(job, tmp_path / "problem.log", limit_s=limit_s)
    assert record["status"] == status and words in record["reason"]
    assert record["correct"] is False and record["correctness"] == "–"
    assert "\n" not in record["reason"]


# ---------------------------------------------------------------------------------------------
# The command end to end on the CPU interpreter


def test_kernelbench_end_to_end_on_cpu(tmp_path: Path) -> None:
    broken = tmp_path / "broken_problem.py"
    broken.write_text("import torch\n\ndef get_inputs(:\n")
    out = tmp_path / "set"
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("ANTHROPIC_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "autokernel", "kernelbench", str(TINY_PROBLEMS), str(broken),
         "--device", "cpu", "--minutes-per-problem", "0.1", "--agent", "tuner", "--out",
         str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr

    document = json.loads((out / "results.json").read_text())
    rows = {r["problem"]: r for r in document["problems"]}
    assert list(rows) == ["channel_sum", "softmax_rows", "broken_problem"]

    assert rows["channel_sum"]["status"] == NO_TARGET
    assert rows["channel_sum"]["correct"] is False
    assert (out / "channel_sum" / "plan.json").is_file()

    softmax = rows["softmax_rows"]
    assert softmax["status"] == DONE and softmax["correctness"] == "PASS" and softmax["correct"]
    assert softmax["speedup_vs_eager"] > 0 and softmax["speedup_vs_compile"] is None
    (target,) = softmax["targets"]
    assert target["kernel_type"] == "softmax" and target["kernel"] and target["spliced"]
    assert target["calls_per_forward"] >= 1
    assert (out / "softmax_rows" / "verify.json").is_file()
    assert (out / "softmax_rows" / "report.md").is_file()

    assert rows["broken_problem"]["status"] == ERROR and rows["broken_problem"]["stage"] == "load"
    assert "syntax error" in rows["broken_problem"]["reason"]

    assert document["fast_p"]["eager"]["fast_0"] == pytest.approx(1 / 3)
    assert document["fast_p"]["compile"]["fast_1"] is None  # not timed on cpu
    tsv_lines = (out / "results.tsv").read_text().splitlines()
    assert tsv_lines[0].split("\t")[:3] == ["problem", "status", "correctness"]
    assert [line.split("\t")[0] for line in tsv_lines[1:]] == list(rows)
    markdown = (out / "results.md").read_text()
    assert "no optimizable target" in markdown and "fast_0" in markdown
    for name in rows:
        assert f"| {name} |" in markdown and name in done.stdout


def test_kernelbench_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "file").write_text("x")
    for args, words in [
        ([str(tmp_path / "missing.py")], "no such problem"),
        ([str(TINY_PROBLEMS), "--out", str(busy)], "not empty"),
        ([str(TINY_PROBLEMS), "--minutes-per-problem", "0"], "--minutes-per-problem"),
        ([str(TINY_PROBLEMS), "--dtype", "fp8"], "unknown dtype"),
    ]:
        done = subprocess.run([sys.executable, "-m", "autokernel", "kernelbench", *args,
                               "--device", "cpu"], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, TRITON_INTERPRET="1"), timeout=120,
                              check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------------------------------------
# Resuming a set: finished problems keep their record, the others run again


def _write_record(out: Path, name: str, **fields: object) -> None:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "logs" / f"{name}.json").write_text(json.dumps({"problem": name, **fields}))


def test_finished_records_keep_every_outcome_but_an_interruption(tmp_path: Path) -> None:
    _write_record(tmp_path, "done", status=DONE)
    _write_record(tmp_path, "crashed", status=CRASHED)
    _write_record(tmp_path, "stopped", status=INTERRUPTED)
    (tmp_path / "logs" / "torn.json").write_text('{"status": "do')  # the machine went away
    kept = finished_records(tmp_path, ["done", "crashed", "stopped", "torn", "never_ran"])
    assert sorted(kept) == ["crashed", "done"]


def _kernelbench(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "autokernel", "kernelbench", *args,
                           "--device", "cpu", "--agent", "tuner"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_kernelbench_resume_runs_only_what_has_no_result(tmp_path: Path) -> None:
    broken = tmp_path / "broken_problem.py"
    broken.write_text("import torch\n\ndef get_inputs(:\n")
    softmax = TINY_PROBLEMS / "softmax_rows.py"
    out = tmp_path / "set"
    meta = {"device": "cpu", "gpu": None, "dtype": "fp32", "minutes_per_problem": 0.1,
            "agent": "tuner", "commit": "abc1234", "created": "earlier"}
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"meta": meta, "problems": []}))
    earlier = {"status": DONE, "correct": True, "correctness": "PASS", "speedup_vs_eager": 1.5,
               "speedup_vs_compile": None, "speedup_figure": "device time per forward",
               "wall_speedup_vs_eager": 0.5, "wall_speedup_vs_compile": None, "targets": [],
               "reason": "", "seconds": 1.0, "marker": "from the earlier call"}
    _write_record(out, "softmax_rows", **earlier)
    _write_record(out, "broken_problem", status=INTERRUPTED)
    (out / "broken_problem").mkdir()  # its partial workspace
    (out / "broken_problem" / "leftover").write_text("x")

    done = _kernelbench(str(softmax), str(broken), "--minutes-per-problem", "0.1", "--out",
                        str(out), "--resume")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 of 2 problems keep their result" in done.stdout
    assert "(from the earlier run)" in done.stdout
    document = json.loads((out / "results.json").read_text())
    rows = {r["problem"]: r for r in document["problems"]}
    assert rows["softmax_rows"]["marker"] == "from the earlier call"  # not run again
    assert rows["broken_problem"]["status"] == ERROR and rows["broken_problem"]["stage"] == "load"
    assert not (out / "broken_problem" / "leftover").exists()
    assert document["meta"]["created"] == "earlier" and len(document["meta"]["resumed"]) == 1
    assert document["fast_p"]["eager"]["fast_1"] == pytest.approx(1 / 2)

    changed = _kernelbench(str(softmax), "--minutes-per-problem", "0.2", "--out", str(out),
                           "--resume")
    assert changed.returncode == 2 and "minutes_per_problem" in changed.stderr
    no_out = _kernelbench(str(softmax), "--resume")
    assert no_out.returncode == 2 and "--resume needs --out" in no_out.stderr
    not_a_set = tmp_path / "not_a_set"
    not_a_set.mkdir()
    stray = _kernelbench(str(softmax), "--out", str(not_a_set), "--resume")
    assert stray.returncode == 2 and "not a kernelbench set" in stray.stderr


# ---------------------------------------------------------------------------------------------
# The shipped problems and example models


@pytest.mark.parametrize("path", sorted(PROBLEMS.glob("*.py")), ids=lambda p: p.stem)
def test_shipped_problem_follows_the_convention(path: Path) -> None:
    """Importing is cheap; building the inputs at full size is not (GBs on a CPU)."""
    from autokernel.profiling.model_loader import import_model_file

    module = import_model_file(path)
    assert (module.__doc__ or "").strip(), "each problem says what it exercises"
    assert callable(module.Model) and callable(module.get_inputs)
    assert callable(module.get_init_inputs)


def test_there_are_a_dozen_problems() -> None:
    assert 10 <= len(list(PROBLEMS.glob("*.py"))) <= 16


def _tiny_wrapper(tmp_path: Path, module: str, inputs: str) -> Path:
    path = tmp_path / f"tiny_{module}.py"
    path.write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(MODELS)!r})
        from {module} import TINY, Model, init_inputs_for, inputs_for  # noqa: F401

        def get_inputs():
            return inputs_for(TINY, {inputs})

        def get_init_inputs():
            return init_inputs_for(TINY)
        """))
    return path


@pytest.mark.parametrize("module, inputs, expected", [
    ("mistral_decoder", "2, 16",
     {"rmsnorm", "add_rmsnorm", "fused_mlp", "matmul", "rotary_embedding", "flash_attention"}),
    ("vit_encoder", "2", {"matmul", "flash_attention", "layernorm", "add_layernorm", "gelu"}),
])
def test_example_model_at_tiny_size_profiles_into_its_targets(
        tmp_path: Path, module: str, inputs: str, expected: set[str]) -> None:
    from autokernel.profiling.model_loader import load_model_file
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan

    path = _tiny_wrapper(tmp_path, module, inputs)
    loaded = load_model_file(path, device="cpu")
    plan = build_plan(profile_model(loaded, warmup=1, iters=1), model=str(path),
                      class_name="Model")
    assert {t.kernel_type for t in plan.targets} == expected
    sys.modules.pop(module, None)  # the wrapper imported it by its bare name


# ---------------------------------------------------------------------------------------------
# Device time and wall time, apart


def _verified(device_vs_eager: float | None, wall_vs_eager: float, passed: bool = True) -> dict:
    """A verify.json (schema 2) reduced to what fill_from_verify reads."""
    device = {} if device_vs_eager is None else {"vs_eager": device_vs_eager,
                                                 "vs_compile": device_vs_eager * 1.3,
                                                 "compile_vs_eager": 0.77}
    return {"passed": passed, "accuracy": {"passed": passed, "error_patched": 1e-4,
                                           "bound": 2e-3},
            "gradients": {"checked": False}, "notes": [], "gpu": "NVIDIA H100",
            "timing": {"meaningful": True, "device": {"method": "cuda-graph", "contestants": {}},
                       "wall": {"contestants": {}}},
            "speedup": {"device": device, "wall": {"vs_eager": wall_vs_eager,
                                                   "vs_compile": wall_vs_eager * 4.5}}}


def _record(name: str) -> dict:
    job = ProblemJob(problem=f"{name}.py", workspace=f"/tmp/{name}", result_path="r.json",
                     device="cuda", dtype="fp16", minutes=1.0, agent="tuner")
    record = new_record(job)
    record["problem"] = name
    return record


def test_a_record_takes_device_time_speedups_and_wall_ones_apart() -> None:
    """03_softmax_wide on the H100: the kernel as fast as eager's on the device, the forward
    host-bound, so the wall figure is launch cost."""
    record = _record("03_softmax_wide")
    fill_from_verify(record, _verified(1.02, 0.326))
    assert record["speedup_vs_eager"] == 1.02 and record["speedup_vs_compile"] == \
        pytest.approx(1.326)
    assert record["wall_speedup_vs_eager"] == 0.326
    assert record["wall_speedup_vs_compile"] == pytest.approx(1.467)
    assert record["speedup_figure"].startswith("device time per forward")
    assert "cuda-graph" in record["speedup_figure"]


def test_the_table_and_fast_p_use_device_time_and_label_the_wall_columns(tmp_path: Path) -> None:
    fast_on_device = _record("03_softmax_wide")
    fill_from_verify(fast_on_device, _verified(1.5, 0.4))
    slow_on_device = _record("05_row_sum")
    fill_from_verify(slow_on_device, _verified(0.9, 1.2))
    # Written by an older autokernel: its speedup_vs_* were wall times; none for fast_p.
    older = {**_record("07_layernorm"), "status": DONE, "correct": True, "correctness": "PASS",
             "speedup_vs_eager": 2.5, "speedup_vs_compile": 2.5}
    for key in ("speedup_figure", "wall_speedup_vs_eager", "wall_speedup_vs_compile"):
        older.pop(key)
    records = [fast_on_device, slow_on_device, older]
    meta = {"device": "cuda", "gpu": "NVIDIA H100", "dtype": "fp16", "minutes_per_problem": 1,
            "agent": "tuner", "commit": "abc1234", "created": "now",
            "versions": {"autokernel": "0", "torch": "2", "triton": "3"}}
    paths = write_tables(tmp_path, records, meta)
    document = json.loads(paths["json"].read_text())
    # fast_1: only the device-time speedup of 1.5 counts; the older record's 2.5 was wall time.
    assert document["fast_p"]["eager"]["fast_1"] == pytest.approx(1 / 3)
    assert document["fast_p"]["eager"]["fast_0"] == 1.0
    assert document["fast_p"]["eager"]["measured"] == 2
    rows = {r["problem"]: r for r in document["problems"]}
    assert rows["07_layernorm"]["speedup_vs_eager"] is None
    assert rows["07_layernorm"]["wall_speedup_vs_eager"] == 2.5
    assert rows["07_layernorm"]["speedup_figure"].startswith("wall only")

    markdown = paths["md"].read_text()
    assert "| vs eager | vs compile | wall vs eager | wall vs compile |" in markdown
    assert "device time per forward" in markdown and "wall time per synchronized forward" \
        in markdown
    assert "| 03_softmax_wide | done | PASS | 1.500× | 1.950× | 0.400× | 1.800× |" in markdown
    assert "| 07_layernorm | done | PASS | – | – | 2.500× | 2.500× |" in markdown
    header = paths["tsv"].read_text().splitlines()[0].split("\t")
    assert header[3:8] == ["speedup_vs_eager", "speedup_vs_compile", "wall_speedup_vs_eager",
                           "wall_speedup_vs_compile", "speedup_figure"]
