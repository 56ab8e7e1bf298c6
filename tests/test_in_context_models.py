"""The in-context-models benchmark (issue 25's acceptance table) on the CPU: its summary of a
verify.json measured on an H200 (docs/benchmarks/in-context-h200/vit-verify-ca774c9.json), the
KernelBench-size copies of the test fixtures, and the per-model loop with a stand-in for the
in-context steps."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from autokernel.benchmarks import in_context_models
from autokernel.benchmarks.in_context_models import at_kernelbench_size, markdown, summarize

ROOT = Path(__file__).resolve().parents[1]
VIT_VERIFY = ROOT / "docs" / "benchmarks" / "in-context-h200" / "vit-verify-ca774c9.json"
FIXTURES = ROOT / "tests" / "fixtures" / "kernelbench"


def test_the_vit_record_summarizes_to_its_measured_delivery() -> None:
    row = summarize(json.loads(VIT_VERIFY.read_text()), "vit_encoder")
    assert row["delivered"] == "cuda-graph" and row["kernels"] == ["01_flash_attention"]
    assert row["kept_in"] == {"eager": ["01_flash_attention"],
                              "cuda-graph": ["01_flash_attention"], "compile": [],
                              "reduce-overhead": []}
    # reduce-overhead is the faster compile mode: the delivery gains least over it
    assert row["faster_compile_mode"] == "reduce-overhead"
    assert row["vs_compile_wall"]["estimate"] == pytest.approx(1.2794, abs=1e-4)
    assert row["vs_compile_wall"]["low"] == pytest.approx(1.2699, abs=1e-4)
    assert row["vs_compile_device"] == pytest.approx(1053.168 / 906.928, rel=1e-6)
    assert row["patched_eager_vs_eager_wall"] == pytest.approx(1370.2305 / 1137.6745, rel=1e-6)
    assert row["checks"] == {"delivery_wall_vs_faster_compile": True,
                             "delivery_device_vs_faster_compile": True,
                             "patched_eager_vs_eager": True}
    table = markdown([row], "header")
    assert "| vit_encoder | cuda-graph + 01_flash_attention | 1.442× |" in table
    assert "reduce-overhead: 1.279× (1.270–1.286)" in table and "all met" in table


def test_a_delivery_slower_than_compile_fails_its_checks() -> None:
    verify = json.loads(VIT_VERIFY.read_text())
    verify["delivery"]["vs"]["reduce-overhead"]["paired"] = {
        "estimate": 0.95, "low": 0.94, "high": 0.96, "rounds": 200}
    for row in verify["deliveries"]:
        if row["delivery"]["mode"] == "reduce-overhead":
            row["device"]["median_us"] = 800.0
    row = summarize(verify, "slower")
    assert row["faster_compile_mode"] == "reduce-overhead"
    assert not row["checks"]["delivery_wall_vs_faster_compile"]
    assert not row["checks"]["delivery_device_vs_faster_compile"]
    assert "NOT met: delivery_wall_vs_faster_compile, delivery_device_vs_faster_compile" in \
        markdown([row], "h")


def test_a_model_without_verify_says_why() -> None:
    table = markdown([{"model": "m", "delivered": None, "failure": "no verify.json (exit 1)"}],
                     "h")
    assert "| m | – (verify: no verify.json (exit 1))" in table


def test_kernelbench_sizes_set_every_named_size(tmp_path: Path) -> None:
    sized = at_kernelbench_size((FIXTURES / "l3_43_mingpt_causal_attention.py").read_text())
    assert sized is not None
    path = tmp_path / "l3_43.py"
    path.write_text(sized)
    module = runpy.run_path(str(path))
    assert (module["BATCH_SIZE"], module["SEQ_LEN"], module["N_EMBD"], module["N_HEAD"],
            module["MAX_SEQLEN"]) == (128, 512, 768, 8, 1024)
    assert module["get_init_inputs"]()[0] == 768
    assert at_kernelbench_size((FIXTURES / "l3_39_gru.py").read_text()) is None
    assert at_kernelbench_size("X = 1\nKERNELBENCH_Y = 2\n") is None  # no Y of its own


def test_each_model_runs_in_turn_and_the_summary_is_written_after_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def fake_in_context(command: list[str], env: dict[str, str], log: Path,
                        timeout_s: float) -> int:
        ran.append(command)
        assert env["COMMIT"] == "abc1234" and timeout_s == 240.0
        model = Path(command[2])
        if model.stem == "broken":
            return 1
        (Path(env["OUT"]) / f"{model.stem}-verify.json").write_text(VIT_VERIFY.read_text())
        return 0

    monkeypatch.setenv("COMMIT", "abc1234")
    monkeypatch.setattr(in_context_models, "run_in_context", fake_in_context)
    models = [FIXTURES / "l3_43_mingpt_causal_attention.py", tmp_path / "broken.py"]
    models[1].write_text("")
    assert in_context_models.main([*map(str, models), "--out", str(tmp_path / "out"),
                                   "--kernelbench-sizes", "--hours", "0.01"]) == 0
    # the KernelBench-sized copy ran, not the fixture itself
    assert ran[0][2].endswith("models/l3_43_mingpt_causal_attention/"
                              "l3_43_mingpt_causal_attention.py")
    assert ran[0][3:] == ["0.01", "", "4"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [m["model"] for m in summary["models"]] == ["l3_43_mingpt_causal_attention", "broken"]
    assert summary["models"][0]["delivered"] == "cuda-graph"
    assert "exit 1" in summary["models"][1]["failure"]
    assert (tmp_path / "out" / "models.tar.gz").is_file()
    assert not (tmp_path / "out" / "models").exists()
