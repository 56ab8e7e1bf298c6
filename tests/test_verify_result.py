"""verify.json saved, read back and printed (integrate/verify_result.py): fast, no model."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autokernel.integrate import verify, verify_result
from autokernel.integrate.verify_result import (KERNEL_SPEEDUP_COLUMN, VERIFY_FILE, print_result,
                                                read_result, routed_where, save_result)


def _result(directory: Path, **changes: Any) -> dict[str, Any]:
    rows = [{"tag": "01_rmsnorm", "modules": ["layers.0.norm", "layers.1.norm"], "scopes": [],
             "functions": [], "skipped": {}, "fallbacks": {}, "calls_per_forward": 2,
             "share": 0.25, "speedup_vs_eager": 1.234, "backward": "kernel"},
            {"tag": "02_softmax", "modules": [], "scopes": [""], "functions": [],
             "skipped": {}, "fallbacks": {"dtype": 1}, "calls_per_forward": 1,
             "share": 0.1, "speedup_vs_eager": None, "backward": "PyTorch"}]
    result = {"run": "tiny-1", "dtype": "float32", "gpu": None, "device": "cpu",
              "directory": str(directory), "kernels": rows, "failure": None,
              "accuracy": {"oracle": "float64", "error_original": 1e-7, "error_patched": 2e-7,
                           "bound": 3e-6, "difference": 1e-7, "max_abs_difference": 1e-6,
                           "passed": True},
              "gradients": {"checked": True, "passed": True, "parameters": 1,
                            "error_original": 1e-7, "error_patched": 1e-7, "bound": 1e-5},
              "timing": {"meaningful": False}}
    result.update(changes)
    return result


def _printed(result: dict[str, Any]) -> str:
    buffer = io.StringIO()
    print_result(result, Console(file=buffer, width=250, color_system=None))
    return buffer.getvalue()


def test_the_result_is_saved_and_read_back(tmp_path: Path) -> None:
    result = _result(tmp_path)
    path = save_result(tmp_path, result)
    assert path == tmp_path / VERIFY_FILE and read_result(tmp_path) == result
    assert [p.name for p in tmp_path.iterdir()] == [VERIFY_FILE]  # no temporary file left over
    path.write_text("{not json", encoding="utf-8")
    assert read_result(tmp_path) is None
    assert read_result(tmp_path / "elsewhere") is None


def test_the_kernel_speedup_column_says_it_is_call_weighted_once(tmp_path: Path) -> None:
    text = _printed(_result(tmp_path))
    assert "call-weighted" in KERNEL_SPEEDUP_COLUMN
    assert text.count("call-weighted") == 1, text
    assert "1.23× eager" in text  # the project's one speedup format
    assert "2 modules" in text and "(s)" not in text
    assert "gradients of 1 parameter:" in text  # a count in the right number
    assert "PASS" in text and f"saved {tmp_path / VERIFY_FILE}" in text


def test_a_failed_result_prints_its_reason_and_where_it_is_saved(tmp_path: Path) -> None:
    text = _printed(_result(tmp_path, failure="the patched model's forward raised ValueError"))
    assert "FAIL: the patched model's forward raised ValueError" in text
    assert text.rstrip().endswith(f"saved {tmp_path / VERIFY_FILE}")
    assert "oracle" not in text  # no accuracy figures for a forward that never ran


def test_verify_still_offers_its_result_functions() -> None:
    """verify.py measures; the result's file and printing live in verify_result.py, re-exported
    for callers that import them from verify."""
    for name in ("VERIFY_FILE", "save_result", "read_result", "routed_where", "print_result"):
        assert getattr(verify, name) is getattr(verify_result, name)
    assert routed_where({"modules": ["a"], "scopes": [""]}) == "1 module; calls in the whole model"


def test_the_eager_wall_time_is_measured_before_anything_is_compiled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once torch.compile has run in a process, eager Python pays for it on every frame (on an
    H200, +1060 µs on a patched forward whose routing is Python): verify times the eager pair's
    wall time first, and the compiled contestants' only after they exist."""
    from types import SimpleNamespace

    import torch

    from autokernel.integrate import in_context
    from autokernel.integrate.ablation import ConfigRounds

    events: list[str] = []

    def fake_time_configs(functions, setup):  # type: ignore[no-untyped-def]
        events.append(f"time {sorted(functions)}")
        for fn in functions.values():
            fn()
        rounds = [10.0] * 20
        return ({name: ConfigRounds({"wall": rounds, "device": rounds}) for name in functions},
                {"wall_rounds": 20, "device_rounds": 20})

    monkeypatch.setattr(in_context, "time_configs", fake_time_configs)
    real_compile = torch.compile

    def compile_spy(model, **kwargs):  # type: ignore[no-untyped-def]
        compiled = real_compile(model, **kwargs)

        def call(*args, **kw):  # type: ignore[no-untyped-def]
            events.append("compiled forward")
            return compiled(*args, **kw)
        return call

    monkeypatch.setattr(torch, "compile", compile_spy)
    model = torch.nn.Linear(4, 4)
    setup = in_context.Setup(
        kernels=SimpleNamespace(kernels=[]), model=model, inputs=(torch.randn(2, 4),),
        device=torch.device("cpu"), copy_model=lambda: torch.nn.Linear(4, 4), rounds=20,
        budget_s=1.0, compile=True, compile_backend="eager", judged=True,
        emit=lambda line: None, note=lambda line: None)
    measured = in_context.measure_in_context(setup)
    first_compiled = events.index("compiled forward")
    assert events.index("time ['none']") < first_compiled  # the eager batch, before any compile
    assert [e for e in events if e.startswith("time")] == ["time ['none']", "time ['none']"]
    assert sorted(measured["classic"]["wall"]) == ["compile", "eager", "patched",
                                                   "patched_compile"]
