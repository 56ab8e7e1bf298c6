"""`autokernel doctor`, in-process (typer's CliRunner) and as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autokernel.cli import app

runner = CliRunner()
FAKE_KEY = "sk-ant-fake-0123456789-DO-NOT-PRINT"
CHECK_NAMES = {"python", "torch", "triton", "gpu", "triton interpreter", "git", "gitpython",
               "ANTHROPIC_API_KEY"}


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-machine report")
def test_doctor_table_on_a_cpu_machine(isolated_cache: Path) -> None:
    result = runner.invoke(app, ["doctor", "--no-aot"], env={"ANTHROPIC_API_KEY": FAKE_KEY})
    assert result.exit_code == 0, result.output
    out = result.output
    for item in ("python", "torch", "triton", "no GPU", "triton interpreter", "max abs error",
                 "git version", "gitpython", "ANTHROPIC_API_KEY", "Ready."):
        assert item in out, f"{item!r} missing from:\n{out}"
    assert torch.__version__ in out
    assert FAKE_KEY not in out and FAKE_KEY[:12] not in out and FAKE_KEY[-8:] not in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-machine report")
def test_doctor_json_on_a_cpu_machine(isolated_cache: Path) -> None:
    result = runner.invoke(app, ["doctor", "--json", "--no-aot"],
                           env={"ANTHROPIC_API_KEY": FAKE_KEY})
    assert result.exit_code == 0, result.output
    assert FAKE_KEY not in result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert report["gpu"] is None and report["datasheet"] is None and report["ceilings"] is None
    assert report["versions"]["torch"] == torch.__version__
    checks = _checks(report)
    assert CHECK_NAMES <= set(checks)
    assert checks["gpu"]["status"] == "info" and "no GPU" in checks["gpu"]["detail"]
    assert checks["triton interpreter"]["status"] == "ok"
    assert checks["triton interpreter"]["essential"] is True
    assert checks["ANTHROPIC_API_KEY"] == {"name": "ANTHROPIC_API_KEY", "status": "ok",
                                           "detail": "set", "essential": False}
    assert not isolated_cache.exists()  # nothing to calibrate without a GPU


def test_doctor_reports_a_missing_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = runner.invoke(app, ["doctor", "--json", "--no-aot", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    key = _checks(json.loads(result.output))["ANTHROPIC_API_KEY"]
    assert key["status"] == "warn" and "not set" in key["detail"]


def test_doctor_fails_when_git_is_missing(tmp_path: Path) -> None:
    # An empty PATH: the interpreter check still runs (sys.executable is absolute), git cannot.
    result = runner.invoke(app, ["doctor", "--json", "--no-aot", "--no-calibrate"],
                           env={"PATH": str(tmp_path)})
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["ok"] is False
    git = _checks(report)["git"]
    assert git["status"] == "fail" and git["essential"] is True
    assert _checks(report)["triton interpreter"]["status"] == "ok"


@pytest.mark.gpu
def test_doctor_rejects_a_gpu_index_that_does_not_exist() -> None:
    result = runner.invoke(app, ["doctor", "--gpu", "99", "--no-aot"])
    assert result.exit_code == 2


def test_doctor_as_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "ANTHROPIC_API_KEY": FAKE_KEY,
           "AUTOKERNEL_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRITON_INTERPRET", None)  # doctor must set it for its own probe
    done = subprocess.run([sys.executable, "-m", "autokernel", "doctor", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert FAKE_KEY not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    checks = _checks(report)
    assert CHECK_NAMES <= set(checks)
    assert checks["triton interpreter"]["status"] == "ok"
    aot = checks["hopper compile (AOT)"]
    assert aot["status"] == "ok" and "sm_90" in aot["detail"], aot


def test_doctor_help_is_fast_to_reach() -> None:
    result = runner.invoke(app, ["doctor", "--help"])
    assert result.exit_code == 0
    for option in ("--calibrate", "--no-calibrate", "--json", "--aot", "--gpu"):
        assert option in result.output


@pytest.mark.gpu
def test_doctor_on_a_gpu_measures_and_caches_ceilings(isolated_cache: Path) -> None:
    props = torch.cuda.get_device_properties(0)
    result = runner.invoke(app, ["doctor", "--json", "--no-aot"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["gpu"]["name"] == props.name
    assert report["gpu"]["compute_capability"] == [props.major, props.minor]
    assert report["datasheet"] is not None, f"{props.name!r} not recognised"
    ceilings = report["ceilings"]
    assert ceilings is not None and (isolated_cache / "ceilings.json").exists()
    assert 0.5 * report["datasheet"]["gbps"] < ceilings["gbps"] < 1.05 * report["datasheet"]["gbps"]
    assert (0.4 * report["datasheet"]["bf16_tflops"] < ceilings["bf16_tflops"]
            < 1.05 * report["datasheet"]["bf16_tflops"])
    assert _checks(report)["cuda op"]["status"] == "ok"

    again = json.loads(runner.invoke(app, ["doctor", "--json", "--no-aot",
                                           "--no-calibrate"]).output)
    assert again["ceilings"] == ceilings  # served from the cache, not re-measured


# -- the candidate sandbox ------------------------------------------------------------------------

def test_doctor_reports_each_layer_of_the_sandbox() -> None:
    from autokernel.harness.sandbox import FEATURES, sandbox_capabilities

    result = runner.invoke(app, ["doctor", "--json", "--no-aot", "--no-calibrate"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    checks = _checks(report)
    expected = sandbox_capabilities()
    assert set(report["sandbox"]) == set(FEATURES) == set(expected)
    for name, capability in expected.items():
        row = checks[f"sandbox {name}"]
        assert row["status"] == ("ok" if capability.available else "warn"), row
        assert capability.detail in row["detail"]
        assert row["essential"] is False
        assert report["sandbox"][name]["available"] is capability.available
        assert report["sandbox"][name]["protects"] == FEATURES[name]


def test_doctor_tries_the_c_compiler_inside_the_sandbox() -> None:
    from autokernel.harness.sandbox import sandbox_capabilities

    if not sandbox_capabilities()["landlock_fs"].available:
        pytest.skip("no Landlock here: nothing to try the compiler in")
    result = runner.invoke(app, ["doctor", "--json", "--no-aot", "--no-calibrate"])
    row = _checks(json.loads(result.output))["sandbox toolchain"]
    assert row["status"] == "ok" and "inside" in row["detail"], row


def test_doctor_warns_about_a_missing_sandbox_layer_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autokernel.harness import sandbox

    real = sandbox.sandbox_capabilities()
    why = "libseccomp.so.2 not found (Debian/Ubuntu package libseccomp2)"
    monkeypatch.setattr(sandbox, "sandbox_capabilities", lambda: {
        **real, "seccomp": sandbox.Capability(False, why)})
    result = runner.invoke(app, ["doctor", "--no-aot", "--no-calibrate"])
    assert result.exit_code == 0, result.output  # a warning, not a failed essential
    assert "sandbox seccomp" in result.output and "libseccomp2" in result.output
    report = json.loads(runner.invoke(app, ["doctor", "--json", "--no-aot",
                                            "--no-calibrate"]).output)
    row = _checks(report)["sandbox seccomp"]
    assert row == {"name": "sandbox seccomp", "status": "warn", "detail": f"unavailable: {why}",
                   "essential": False}


def test_the_checks_are_made_below_the_cli_and_say_what_the_json_says(
        isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline makes the checks (the CLI only prints them): a missing essential fails the
    report, a missing API key only warns."""
    import autokernel.pipeline.doctor as doctor

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    report = doctor.run_checks(aot=False)
    names = {c.name for c in report.checks}
    assert CHECK_NAMES <= names and report.ok
    assert report.to_dict()["checks"][-1] == {"name": "ANTHROPIC_API_KEY", "status": "warn",
                                              "detail": "not set (only the claude agent needs it)",
                                              "essential": False}
    monkeypatch.setattr(doctor, "git_checks", lambda: [doctor.Check("git", "fail", "no git",
                                                                    essential=True)])
    assert not doctor.run_checks(aot=False).ok
