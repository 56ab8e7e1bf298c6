"""Issue 29: the README's measured result is rendered from a verified run's own files
(autokernel/integrate/result_record.py, `python -m autokernel.benchmarks record-result`): the table matches report.md,
the end-to-end sentence matches verify.json, and docs/benchmarks/NAME/ records where it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_workspace import PairedFakeBench, loop_config, make_plan, new_run, runner_for

from autokernel.agents.tuner import TunerAgent
from autokernel.integrate.loader import open_run
from autokernel.integrate.report import build_report
from autokernel.integrate.result_record import (SECTION_BEGIN, SECTION_END, record_result,
                                                replace_section)
from autokernel.integrate.verify_result import save_result
from autokernel.loop.workspace import RUN_FILE
from autokernel.text import format_speedup


def verified_gpu_run(tmp_path: Path) -> Path:
    """A fake-harness run dressed as an H200 run, with a verify.json."""
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
               loop_config(max_experiments=6)).run()
    info = json.loads((ws.root / RUN_FILE).read_text())
    info.update(model="examples/models/model.py", model_copy="model/model.py",
                command="autokernel run examples/models/model.py", created="2026-11-29",
                gpu="NVIDIA H200", versions={"torch": "2.11.0+cu130", "triton": "3.6.0"},
                config={"device": "cuda", "dtype": "fp16", "agent": "tuner"})
    (ws.root / RUN_FILE).write_text(json.dumps(info))
    save_result(ws.root, {
        "created": "2026-11-29T08:00", "device": "cuda", "gpu": "NVIDIA H200", "dtype": "fp16",
        "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"},
        "kernels": [], "routed_calls_per_forward": 2, "passed": True,
        "accuracy": {"passed": True, "oracle": "fp32", "error_original": 1e-3,
                     "error_patched": 1e-3},
        "gradients": {"checked": True, "passed": True},
        "speedup": {"device": {"vs_eager": 1.234, "vs_compile": 1.05,
                               "patched_compile_vs_compile": 1.01, "noise": 0.01}},
        "timing": {"meaningful": True},
        "delivery": {"mode": "reduce-overhead", "kernels": ["01_softmax"],
                     "why": "the fastest in wall and device time",
                     "vs": {"compile": {"ratio": 1.08, "paired": {
                         "estimate": 1.081, "low": 1.07, "high": 1.09, "rounds": 200}},
                            "eager": {"ratio": 1.6, "paired": None}},
                     "accuracy": {"passed": True}}})
    return ws.root


def test_the_readme_section_and_the_record_come_from_the_run(tmp_path: Path) -> None:
    root = verified_gpu_run(tmp_path)
    benchmarks = tmp_path / "docs" / "benchmarks"
    record, section = record_result(root, benchmarks, "night-h200-abc1234", "abc1234",
                                    driver="580.1")
    assert sorted(p.name for p in record.iterdir()) == [
        "README.md", "progress.png", "report.md", "results.tsv", "verify.json"]
    readme = (record / "README.md").read_text()
    for words in ("NVIDIA H200 (driver 580.1)", "torch 2.11.0+cu130", "`abc1234`",
                  "autokernel run examples/models/model.py"):
        assert words in readme, words
    report = build_report(open_run(root))
    (target,) = report.targets
    row = next(line for line in section.splitlines() if line.startswith("| 01_softmax |"))
    assert row == (f"| 01_softmax | 30.0% | {format_speedup(target.vs_baseline)} | "
                   f"{format_speedup(target.speedup_vs_eager)} | "
                   f"{format_speedup(target.speedup_vs_compile)} | {target.experiments} | "
                   f"{target.keeps} |")
    assert "1.234× vs eager PyTorch, 1.050× vs torch.compile" in section
    assert "output PASS, gradients PASS" in section
    # what optimize(model) returns is said beside the patched eager model's figures
    delivered = section[section.index("Delivered by `autokernel.load(run).optimize(model)`"):]
    assert delivered.startswith("Delivered by `autokernel.load(run).optimize(model)`: "
                                "reduce-overhead with 01_softmax; wall time 1.081× (1.070–1.090) "
                                "vs compile, 1.600× vs eager (medians of two batches): the "
                                "fastest in wall and device time; its output PASS."), delivered
    assert "reduce-overhead with 01_softmax" in readme
    assert "](docs/benchmarks/night-h200-abc1234/progress.png)" in section

    readme_text = f"# autokernel\n\nintro\n\n{SECTION_BEGIN}\nnot measured yet\n{SECTION_END}\n"
    updated = replace_section(readme_text, section)
    assert updated.startswith("# autokernel\n\nintro\n\n") and "not measured yet" not in updated
    assert updated.count(SECTION_BEGIN) == 1 and updated.rstrip().endswith(SECTION_END)
    with pytest.raises(ValueError, match="no "):
        replace_section("# no markers\n", section)


def test_a_cpu_run_is_refused_unless_rehearsing(tmp_path: Path) -> None:
    root = verified_gpu_run(tmp_path)
    info = json.loads((root / RUN_FILE).read_text())
    info["config"]["device"] = "cpu"
    (root / RUN_FILE).write_text(json.dumps(info))
    with pytest.raises(ValueError, match="ran on the CPU"):
        record_result(root, tmp_path / "b", "x", "abc", driver="-")
    record, _ = record_result(root, tmp_path / "b", "x", "abc", driver="-", allow_cpu=True)
    assert (record / "progress.png").is_file()
