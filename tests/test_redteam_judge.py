"""The judge's own red team (issue 26): every class of attack on "a judge that trusts nothing the
candidate process says", each kernel in tests/adversarial/judge failing for the reason it is
meant to, and the honest controls passing.

Attacks that need arbitrary code in the candidate process (frames, the socket, files) run with
the static scan off: the scan is a convenience, and no verdict may rest on it. To stay fast on
the interpreter, an attack caught by a correctness stage runs the stages up to that one only
(`only_stages`: the rest say "skip"); timing attacks run the smoke case, then the timing.
GPU runs of the same files are in tests/test_judge_gpu.py (marked gpu).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE

from autokernel.harness import runner
from autokernel.harness.compare import check_output
from autokernel.ops import get_spec
from autokernel.harness.result import BenchResult, Status
from autokernel.harness.sandbox import sandbox_capabilities
from autokernel.harness.static_scan import scan_source

RED_TEAM = Path(__file__).parent / "adversarial" / "judge"
TIMEOUT_S = 300.0
CAPABILITIES = sandbox_capabilities()
LANDLOCK = CAPABILITIES["landlock_fs"].available
ON_CPU = DEVICE == "cpu"


def bench(name: str, tmp_path: Path, stages: list[str] | None = None,
          **options: object) -> BenchResult:
    options.setdefault("quick", True)
    return runner.run_bench(RED_TEAM / name, device=DEVICE, timeout_s=TIMEOUT_S,
                            cache_dir=tmp_path / "cache", only_stages=stages, **options)


# -- class 1: the four scan escapes (the scan itself; the runner for the coding cookie) ----------

@pytest.mark.parametrize("name,rule,text", [
    ("escape_match_globals.py", "private-attribute", "match pattern reads attribute '__globals__'"),
    ("escape_self_parameter.py", "private-attribute", "self._version"),
    ("escape_enum_builtins.py", "module-escape", "the module builtins"),
    ("escape_pkgutil_resolve.py", "module-escape", "the module pkgutil"),
    ("escape_typing_extensions_io.py", "module-escape", "the module io"),
    ("escape_coding_utf7.py", "encoding", "'utf-7'"),
])
def test_the_scan_closes_its_escapes(name: str, rule: str, text: str) -> None:
    found = scan_source((RED_TEAM / name).read_text())
    assert any(v.rule == rule and text in v.message for v in found), found


@pytest.mark.parametrize("static", [True, False])
def test_a_coding_cookie_is_refused_with_or_without_the_scan(static: bool, tmp_path: Path) -> None:
    result = bench("escape_coding_utf7.py", tmp_path, static_scan=static)
    assert result.status is Status.REJECTED and result.rule == "encoding", result.reason


# -- classes 2 to 10: (file, stages run, status, rule, stage, text in the reason) -----------------

SMOKE = ["smoke"]
CASES: list[tuple[str, list[str] | None, Status, str | None, str | None, str]] = [
    # 2: the channel carries data the judge asked for, nothing else
    ("forged_verdict_frame.py", SMOKE, Status.CRASH, None, "worker", "out of order"),
    # forged_violation_pass.py: test_a_forged_pass_is_a_crash_and_leaves_no_baseline
    ("forged_device_times.py", SMOKE, Status.FAIL, "timing-contradiction", "timing",
     "the judge's clock"),
    ("zeros_while_timed.py", SMOKE, Status.FAIL, "replay", "timing",
     "produced while timing is wrong"),
    # 3: no seed in the candidate process
    ("seed_replay.py", SMOKE, Status.FAIL, None, "smoke", "outside atol"),
    # 5: tells
    ("tell_poison_pattern.py", SMOKE, Status.FAIL, None, "smoke", ""),
    ("tell_thread_count.py", SMOKE, Status.FAIL, None, "smoke", "outside atol"),
    ("counter_in_default.py", SMOKE, Status.REJECTED, "call-time-state", "smoke",
     "kernel_fn defaults changed"),
    ("counter_in_closure.py", SMOKE, Status.REJECTED, "call-time-state", "smoke",
     "closure 'calls' changed"),
    ("raw_thread_late_zero.py", SMOKE, Status.REJECTED, "thread", "smoke", "still running"),
    # Its hidden list of outputs is a cached helper's result: module state (guards/state.py).
    ("late_write_next_call.py", SMOKE, Status.REJECTED, "call-time-state", "smoke",
     "_previous[()] changed"),
    # 6: tolerances that scale
    ("softmax_drops_small.py", SMOKE, Status.FAIL, None, "smoke", "row rule"),
    ("all_zero_wide_rows.py", ["smoke", "shape_sweep"], Status.FAIL, None, "shape_sweep", ""),
    # 7: the case plan's gaps
    ("max_over_first_columns.py", ["smoke", "shape_sweep", "stability"], Status.FAIL, None,
     "stability", "adversarial"),
    ("strides_only_fp16.py", ["smoke", "edge_sizes"], Status.FAIL, None, "edge_sizes", "layout"),
    ("ignores_storage_offset.py", ["smoke", "edge_sizes"], Status.FAIL, None, "edge_sizes",
     "layout:offset"),
    ("wrong_at_multiples_of_64.py", ["smoke", "shape_sweep"], Status.FAIL, None, "shape_sweep",
     ""),
    ("nan_to_minus_inf.py", ["smoke", "stability"], Status.FAIL, None, "stability",
     "nan-and-inf"),
    ("fitted_to_documented_shapes.py", ["smoke", "shape_sweep"], Status.FAIL, None,
     "shape_sweep", ""),
    # 8: candidate text is escaped and capped: test_terminal_text_is_escaped_and_capped
]
SCAN_OFF = {"forged_verdict_frame.py", "forged_device_times.py",
            "zeros_while_timed.py", "seed_replay.py", "counter_in_closure.py",
            "raw_thread_late_zero.py", "late_write_next_call.py", "counter_in_default.py"}


@pytest.mark.skipif(not ON_CPU, reason="the stages named are the interpreter's plan")
@pytest.mark.parametrize("name,stages,status,rule,stage,text", CASES,
                         ids=[c[0].removesuffix(".py") for c in CASES])
def test_red_team(name: str, stages: list[str] | None, status: Status, rule: str | None,
                  stage: str | None, text: str, tmp_path: Path) -> None:
    result = bench(name, tmp_path, stages, static_scan=name not in SCAN_OFF)
    assert result.status is status, result.reason
    assert rule is None or result.rule == rule, result.reason
    assert stage is None or result.stage == stage, result.reason
    assert text in result.reason, result.reason


@pytest.mark.parametrize("dtype,width", [(torch.bfloat16, 1000), (torch.float16, 1500),
                                         (torch.bfloat16, 4097)])
def test_an_all_zero_softmax_never_passes(dtype: torch.dtype, width: int) -> None:
    """Every probability of a wide row is below bf16's atol: element by element, zeros pass."""
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(width)) * 0.3
    ref = torch.softmax(x.double(), dim=-1)
    tolerance = get_spec("softmax").tolerance(dtype)
    zeros = torch.zeros(3, width, dtype=dtype)
    found = check_output(zeros, ref, (3, width), dtype, torch.device("cpu"), tolerance)
    assert found is not None and found.kind == "degenerate", found
    right = ref.to(dtype)
    assert check_output(right, ref, (3, width), dtype, torch.device("cpu"), tolerance) is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dropping_small_probabilities_fails_the_row_rule(dtype: torch.dtype) -> None:
    x = torch.randn(4, 700, generator=torch.Generator().manual_seed(7)) * 3
    ref = torch.softmax(x.double(), dim=-1)
    tolerance = get_spec("softmax").tolerance(dtype)
    dropped = torch.where(ref < tolerance.atol * 0.99, 0.0, ref).to(dtype)
    found = check_output(dropped, ref, (4, 700), dtype, torch.device("cpu"), tolerance)
    assert found is not None, "dropping the small probabilities passed"


def test_the_scan_sees_a_counter_in_a_default(tmp_path: Path) -> None:
    found = scan_source((RED_TEAM / "counter_in_default.py").read_text())
    assert any(v.rule == "call-time-state" for v in found), found


def test_terminal_text_is_escaped_and_capped(tmp_path: Path) -> None:
    result = bench("forged_terminal_text.py", tmp_path, SMOKE)
    assert result.status is Status.CRASH and result.stage == "smoke", result.reason
    assert "RuntimeError" in result.reason, result.reason
    for text in (result.reason, result.detail):
        assert "\x1b" not in text and "\r" not in text
        assert "[bold green]" not in text.replace("\\[bold green]", "")
    assert len(result.reason) <= 2000 and len(result.detail) <= 9000


@pytest.mark.skipif(not LANDLOCK, reason="needs Landlock")
@pytest.mark.parametrize("name", ["read_outside_files.py", "read_other_environ.py"])
def test_the_sandbox_reads_only_what_it_needs(name: str, tmp_path: Path) -> None:
    result = bench(name, tmp_path, SMOKE, static_scan=False)
    assert result.status is Status.CRASH and "Permission denied" in result.reason, result.reason


# -- class 2: the incumbent and the challenger in processes of their own -------------------------

def test_a_challenger_cannot_reach_the_incumbent(tmp_path: Path) -> None:
    result = bench("sabotage_incumbent.py", tmp_path, SMOKE, static_scan=False,
                   incumbent=RED_TEAM / "honest_softmax_control.py")
    assert result.status is Status.PASS, result.reason
    assert result.timings[0].incumbent_us is not None, result.notes


def test_an_incumbent_cannot_reach_the_challenger(tmp_path: Path) -> None:
    """Also the honest control's own PASS, scan on (the incumbent's file is never scanned)."""
    result = runner.run_bench(RED_TEAM / "honest_softmax_control.py", device=DEVICE,
                              timeout_s=TIMEOUT_S, cache_dir=tmp_path / "cache", quick=True,
                              only_stages=SMOKE,
                              incumbent=RED_TEAM / "incumbent_slows_challenger.py")
    assert result.status is Status.PASS, result.reason
    assert result.stages.get("gpu_compile", "pass") == "pass"
    assert result.timings[0].incumbent_us is not None, result.notes


# -- class 4: nothing persists; quotas ------------------------------------------------------------

def test_a_planted_cache_file_does_not_survive(tmp_path: Path) -> None:
    result = bench("plant_triton_cache.py", tmp_path, SMOKE, static_scan=False)
    planted = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()
               and b"planted-by-redteam" in p.read_bytes()]
    assert planted == [], (result.status, planted)


def test_a_forged_pass_is_a_crash_and_leaves_no_baseline(tmp_path: Path) -> None:
    """A 'violation' of status PASS is no reply the judge accepts; and the baselines it
    carries are never written (only the judge's own measurements are)."""
    result = bench("forged_violation_pass.py", tmp_path, SMOKE, static_scan=False)
    assert result.status is Status.CRASH and result.stage == "worker", result.reason
    assert "only the judge decides" in result.reason, result.reason
    assert runner.read_baseline_cache(tmp_path / "cache") == {}


def test_a_candidate_that_writes_too_much_is_rejected(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "WRITE_QUOTA_BYTES", 2 * 2**20)
    result = bench("write_quota.py", tmp_path, SMOKE, static_scan=False)
    assert result.status is Status.REJECTED and result.rule == "write-quota", result.reason


# -- class 10 and the honest controls -------------------------------------------------------------

@pytest.mark.skipif(not ON_CPU, reason="the interpreter's gap")
@pytest.mark.parametrize("name,static,text", [
    ("numpy_in_jit.py", False, "Unsupported function"),
    # The scan passes it: its import prints a forged answer and exits, when compiling only.
    ("forged_compile_answer.py", True, "SystemExit"),
])
def test_a_triton_body_that_runs_numpy_fails_the_gpu_compile(name: str, static: bool, text: str,
                                                              tmp_path: Path) -> None:
    result = bench(name, tmp_path, SMOKE, static_scan=static)
    assert result.status is Status.FAIL and result.rule == "gpu-compile", result.reason
    assert result.stage == "gpu_compile" and "sm_90" in result.reason and text in result.reason


# honest_softmax_control.py passes in test_an_incumbent_cannot_reach_the_challenger.
@pytest.mark.parametrize("name", ["honest_factory_closure.py"])
def test_honest_controls_pass(name: str, tmp_path: Path) -> None:
    result = bench(name, tmp_path, SMOKE)
    assert result.status is Status.PASS, result.reason
    assert result.stages.get("gpu_compile", "pass") == "pass"


def test_every_red_team_file_is_judged_here() -> None:
    named = {c[0] for c in CASES} | {
        "forged_violation_pass.py", "forged_terminal_text.py", "escape_match_globals.py",
        "escape_self_parameter.py", "escape_enum_builtins.py",
        "escape_pkgutil_resolve.py", "escape_typing_extensions_io.py", "escape_coding_utf7.py",
        "read_outside_files.py", "read_other_environ.py", "sabotage_incumbent.py",
        "incumbent_slows_challenger.py", "plant_triton_cache.py", "write_quota.py",
        "numpy_in_jit.py", "forged_compile_answer.py", "honest_softmax_control.py",
        "honest_factory_closure.py"}
    # Red team 4's files (rt4_*) are judged in tests/test_redteam4_*.py.
    assert {p.name for p in RED_TEAM.glob("*.py") if not p.name.startswith("rt4_")} == named
    assert len(named) - 2 >= 30  # attacks, besides the two honest controls
