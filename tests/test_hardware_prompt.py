"""The hardware facts in the Claude agent's prompt (autokernel.loop.hardware), and a golden prompt.

The golden test builds a fixed experiment through the loop's own `Briefing` (an H100 from the
database, a fixed calibration cache, a fixed best verdict with per-shape timings, a fixed best
kernel and a saved reverted candidate), renders the opening message and compares it with
tests/fixtures/hardware_prompt.golden.md. The ahead-of-time compile is replaced by fixed figures
there (registers would move with the Triton version); `test_compile_in_child_*` runs the real one.

Regenerate the golden file after an intended prompt change:
    AUTOKERNEL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_hardware_prompt.py
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from autokernel import reference
from autokernel.agents.base import Attempt
from autokernel.agents.claude_prompt import opening_message
from autokernel.gpu import ncu
from autokernel.gpu.calibrate import Ceilings, cached_ceilings_for, write_cache
from autokernel.gpu.database import GPUS_BY_KEY
from autokernel.gpu.occupancy import occupancy, sm_limits, waves
from autokernel.gpu.resources import (
    LaunchResources, ResourceProbe, ResourceReport, compile_in_child,
)
from autokernel.gpu.roofline import roofline
from autokernel.harness.result import BenchResult, ShapeTiming, Status
from autokernel.loop.config import LoopConfig
from autokernel.loop.context import Briefing
from autokernel.loop.hardware import describe_gpu, gpu_facts
from autokernel.loop.state import Measurement, TargetState
from autokernel.loop.workspace import Workspace
from autokernel.ops import get_spec
from autokernel.profiling.plan import Plan, Target

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "hardware_prompt.golden.md"
UPDATE_ENV = "AUTOKERNEL_UPDATE_GOLDEN"
BEST_KERNEL = (FIXTURES / "anthropic" / "reduce_rows.py").read_text()
CANDIDATE_KERNEL = (FIXTURES / "anthropic" / "reduce_row_vector.py").read_text()
H100_NAME = "NVIDIA H100 80GB HBM3"
SHAPES = [[4096, 4096], [1024, 16384]]

# What the fake compile answers, per source: the best fits well, the candidate spills.
FIXED_LAUNCHES = {
    BEST_KERNEL: [LaunchResources("_row_sums", 4, 3, [1024, 1, 1], registers=29, spill_bytes=0,
                                  shared_bytes=8, constexprs={"BLOCK_M": 4, "BLOCK_N": 64})],
    CANDIDATE_KERNEL: [LaunchResources("_row_sum", 2, 2, [4096, 1, 1], registers=255,
                                       spill_bytes=96, shared_bytes=16384)],
}


def fixed_compile(path: Path, shape: Sequence[int], dtype: str, arch: int,
                  timeout_s: float) -> ResourceReport:
    return ResourceReport(FIXED_LAUNCHES[path.read_text()], arch=arch)


CEILINGS = Ceilings(gbps=3010.0, bf16_tflops=790.0, measured_at="2026-11-20T03:00:00+00:00",
                    gpu_name=H100_NAME, method="fixed for the test")


def primary_roofline() -> Any:
    return roofline(get_spec("reduce"), tuple(SHAPES[0]), torch.float16, 14.2,
                    GPUS_BY_KEY["h100-sxm"], CEILINGS)


def best_verdict() -> BenchResult:
    roof = primary_roofline()  # what the harness would have reported at the primary shape
    timings = [ShapeTiming(shape=SHAPES[0], dtype="fp16", latency_us=14.2, iqr_us=0.1,
                           eager_us=30.5, speedup_vs_eager=2.15, speedup_vs_compile=1.2,
                           pct_peak_datasheet=roof.pct_peak_datasheet,
                           pct_peak_measured=roof.pct_peak_measured),
               ShapeTiming(shape=SHAPES[1], dtype="fp16", latency_us=13.1, iqr_us=0.2,
                           eager_us=29.0)]
    return BenchResult(status=Status.PASS, kernel_type="reduce", shapes=SHAPES,
                       dtypes=["fp16", "fp16"], gpu=H100_NAME, timings=timings)


class NoResults:
    def rows(self) -> list[dict[str, Any]]:
        return []


def render_opening(context: Any) -> str:
    # opening_message lost its `hypotheses` argument (they now travel on each Attempt); accept
    # both spellings so this test does not depend on which side of that change it runs on.
    if "hypotheses" in inspect.signature(opening_message).parameters:
        message = opening_message(context, {}, 12)  # type: ignore[call-arg]
    else:
        message = opening_message(context, 12)
    return "\n\n".join(block["text"] for block in message["content"])


@pytest.fixture
def golden_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AUTOKERNEL_KERNEL_RESOURCES", "1")
    monkeypatch.delenv("AUTOKERNEL_GPU_PEAKS", raising=False)
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)  # the same note on any machine
    write_cache({f"{H100_NAME} | 85045379072 B | torch {torch.__version__} | cuda 13.0": CEILINGS})

    root = tmp_path / "run"
    (root / "attempts" / "0002").mkdir(parents=True)
    (root / "kernel.py").write_text(BEST_KERNEL)
    (root / "attempts" / "0002" / "kernel.py").write_text(CANDIDATE_KERNEL)
    target = Target(rank=1, kernel_type="reduce", shapes=SHAPES, dtype="fp16", calls=32,
                    time_ms=0.42, share=0.21, bench_shape=SHAPES[0], amdahl_2x=1.12,
                    cumulative_2x=1.12)
    plan = Plan(model="model.py", class_name="Model", device="cuda", dtype="fp16", gpu=H100_NAME,
                total_ms=2.0, targets=[target])
    briefing = Briefing(Workspace(root), plan,
                        LoopConfig(device="cuda", dtype="fp16", agent="claude"))
    briefing.hardware.probe.runner = fixed_compile
    verdict = best_verdict()
    state = TargetState(index=0, rank=1, kernel_type="reduce", tag="01_reduce",
                        best=Measurement(experiment=1, commit="abc123", latency_us=14.2,
                                         iqr_us=0.1, speedup_vs_eager=2.15,
                                         speedup_vs_compile=1.2,
                                         pct_peak=verdict.pct_peak_datasheet,
                                         pct_peak_measured=verdict.pct_peak_measured),
                        best_result=verdict.to_dict())
    briefing.history_of(state, NoResults()).extend([  # type: ignore[arg-type]
        Attempt(0, "starter", "baseline", latency_us=30.0, speedup_vs_eager=1.0),
        Attempt(1, "4 rows per program, float32 tile", "keep", latency_us=14.2,
                speedup_vs_eager=2.15, hypothesis="more bytes in flight per program"),
        Attempt(2, "one row per program, row vector", "revert", latency_us=19.0,
                speedup_vs_eager=1.6, hypothesis="fewer masks"),
    ])
    context = briefing.context(state, 3, NoResults())  # type: ignore[arg-type]
    context.reference_source = inspect.getsource(reference.reduce)
    return render_opening(context)


def test_opening_message_matches_the_golden_file(golden_prompt: str) -> None:
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.write_text(golden_prompt)
    expected = GOLDEN.read_text()
    diff = "\n".join(difflib.unified_diff(expected.splitlines(), golden_prompt.splitlines(),
                                          "golden", "now", lineterm=""))
    assert golden_prompt == expected, f"prompt changed ({UPDATE_ENV}=1 regenerates):\n{diff}"


def test_the_prompt_states_the_key_hardware_facts(golden_prompt: str) -> None:
    text = golden_prompt
    for fact in ("NVIDIA H100 SXM5 80GB (sm_90, this run's GPU)", "132 SMs",
                 "memory bandwidth 3352 GB/s", "bf16 989.4", "fp32 (non-tensor) 66.9", "L2 50 MB",
                 "65536 registers", "228 KiB shared memory", "64 warps",
                 "Measured ceilings (calibrated 2026-11-20): copy 3010 GB/s (90% of datasheet)",
                 "bf16 matmul 790 TFLOP/s (80% of datasheet)",
                 "- best: _row_sums: 29 registers/thread, 0 B spilled/thread, 8 B shared/block, "
                 "4 warps", "theoretical occupancy 16 blocks/SM = 64/64 warps (100%",
                 "0.48 waves on 132 SMs",
                 "latest candidate #2 (revert): _row_sum: 255 registers/thread, 96 B "
                 "spilled/thread (SPILLS",
                 "Nsight Compute: not collected (no `ncu` on this machine's PATH)."):
        assert fact in text, fact
    # The roofline per timed shape, as roofline() computes it.
    spec, gpu = get_spec("reduce"), GPUS_BY_KEY["h100-sxm"]
    for timing in best_verdict().timings:
        roof = roofline(spec, tuple(timing.shape), torch.float16, timing.latency_us, gpu,
                        CEILINGS)
        assert roof.bound == "memory"
        line = next(line for line in text.splitlines()
                    if line.startswith(f"- {spec.format_shape(tuple(timing.shape))} fp16:"))
        assert f"{roof.pct_peak_measured:.0f}% of the measured ceiling" in line
        assert f"{roof.pct_peak_datasheet:.0f}% of the datasheet roofline" in line
        assert "memory-bound" in line


def test_a_cpu_run_says_timings_mean_nothing_and_names_the_assumed_gpu() -> None:
    facts = gpu_facts("cpu", None)
    text = "\n".join(describe_gpu(facts))
    assert "timings are NOT meaningful" in text
    assert "the assumed target (the plan names no GPU)" in text
    assert "NVIDIA H100 SXM5 80GB" in text and "132 SMs" in text
    assert "Measured ceilings" not in text
    profiled = "\n".join(describe_gpu(gpu_facts("cpu", "NVIDIA A100-SXM4-80GB")))
    assert "the GPU the plan was profiled on" in profiled and "108 SMs" in profiled
    assert "164 KiB shared memory" in profiled


def test_an_unknown_gpu_and_no_calibration_are_said_plainly(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    assert "not in autokernel's table" in "\n".join(describe_gpu(gpu_facts("cuda", "Mystery X")))
    text = "\n".join(describe_gpu(gpu_facts("cuda", H100_NAME)))
    assert "none cached for this GPU" in text and "datasheet only" in text


def test_cached_ceilings_are_found_by_gpu_name_and_torch_version(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    old = Ceilings(2900.0, 700.0, "2026-01-01T00:00:00+00:00", H100_NAME, "")
    new = Ceilings(3000.0, 780.0, "2026-02-01T00:00:00+00:00", H100_NAME, "")
    other_torch = Ceilings(1.0, 1.0, "2026-03-01T00:00:00+00:00", H100_NAME, "")
    write_cache({f"{H100_NAME} | 1 B | torch {torch.__version__} | cuda 13.0": old,
                 f"{H100_NAME} | 2 B | torch {torch.__version__} | cuda 13.0": new,
                 f"{H100_NAME} | 1 B | torch 0.1 | cuda 13.0": other_torch}, path)
    assert cached_ceilings_for(H100_NAME, path) == new
    assert cached_ceilings_for("NVIDIA H200", path) is None


# -- occupancy and waves ---------------------------------------------------------------------


def test_occupancy_follows_the_tightest_sm_limit() -> None:
    hopper = sm_limits((9, 0))
    assert hopper is not None and hopper.max_warps == 64
    light = occupancy(hopper, num_warps=4, registers_per_thread=29, shared_bytes=8)
    assert (light.blocks_per_sm, light.percent, light.limiter) == (16, 100.0, "warps")
    heavy = occupancy(hopper, num_warps=8, registers_per_thread=128, shared_bytes=0)
    assert (heavy.blocks_per_sm, heavy.percent, heavy.limiter) == (2, 25.0, "registers")
    tiles = occupancy(hopper, num_warps=4, registers_per_thread=64, shared_bytes=100 * 1024)
    assert (tiles.blocks_per_sm, tiles.limiter) == (2, "shared memory")
    too_big = occupancy(hopper, num_warps=4, registers_per_thread=32, shared_bytes=240 * 1024)
    assert too_big.blocks_per_sm == 0
    assert sm_limits((8, 9)).max_warps == 48 and sm_limits((9, 1)) is hopper  # type: ignore
    assert sm_limits(None) is None and sm_limits((99, 0)) is None
    assert waves(1024, 132, 16) == pytest.approx(0.4848, abs=1e-3)
    assert waves(10, 132, 0) is None


# -- the ahead-of-time compile: cached, bounded ----------------------------------------------


def test_resource_reports_are_cached_in_memory_and_on_disk(tmp_path: Path) -> None:
    calls: list[str] = []

    def counting(path: Path, shape: Sequence[int], dtype: str, arch: int,
                 timeout_s: float) -> ResourceReport:
        calls.append(path.read_text())
        return fixed_compile(path, shape, dtype, arch, timeout_s)

    probe = ResourceProbe(cache_dir=tmp_path, runner=counting)
    first = probe.report(BEST_KERNEL, [4096, 4096], "fp16", 90)
    assert probe.report(BEST_KERNEL, [4096, 4096], "fp16", 90) == first
    probe.report(BEST_KERNEL, [4096, 4096], "fp16", 80)  # another architecture: compiled again
    assert len(calls) == 2
    again = ResourceProbe(cache_dir=tmp_path, runner=counting)  # a resumed run
    assert again.report(BEST_KERNEL, [4096, 4096], "fp16", 90).launches == first.launches
    assert len(calls) == 2


def test_a_failing_or_slow_compile_is_one_line_and_never_raises(tmp_path: Path) -> None:
    def broken(*args: Any) -> ResourceReport:
        raise RuntimeError("ptxas exploded")

    report = ResourceProbe(runner=broken).report("x = 1\n", [8], "fp16", 90)
    assert report.launches == [] and "ptxas exploded" in report.error
    slow = ResourceProbe(cache_dir=tmp_path, timeout_s=0.2).report(BEST_KERNEL, [64, 64],
                                                                    "fp16", 90)
    assert slow.launches == [] and slow.error == "compile took over 0.2 s; skipped"
    assert not list(tmp_path.iterdir())  # a timeout is not remembered across processes


def test_a_source_the_static_scan_refuses_is_never_compiled(tmp_path: Path) -> None:
    """Compiling runs the file's host code outside the sandbox: a rejected attempt's cheat (here
    a file write) must not run because the prompt wants its register count."""
    def must_not_run(*args: Any) -> ResourceReport:
        raise AssertionError("a refused source was compiled")

    cheat = BEST_KERNEL + "\nopen('/tmp/pwned', 'w').write('x')\n"
    report = ResourceProbe(cache_dir=tmp_path, runner=must_not_run).report(
        cheat, [64, 64], "fp16", 90)
    assert report.launches == [] and report.error.startswith("not compiled: the harness's "
                                                             "static scan refuses it")


@pytest.mark.slow  # two fresh Python processes import torch and Triton: 5-15 s on 2 CPUs
def test_compile_in_child_reads_the_real_resource_usage(tmp_path: Path) -> None:
    path = tmp_path / "kernel.py"
    path.write_text(BEST_KERNEL)
    report = compile_in_child(path, [4096, 4096], "fp16", 90, timeout_s=120)
    assert report.error == "", report.error
    [launch] = report.launches
    assert launch.kernel == "_row_sums" and launch.grid == [1024, 1, 1]
    assert launch.num_warps == 4 and launch.constexprs == {"BLOCK_M": 4, "BLOCK_N": 64}
    assert launch.registers and 0 < launch.registers <= 255
    assert launch.spill_bytes == 0 and launch.shared_bytes is not None


# -- Nsight Compute --------------------------------------------------------------------------


def test_ncu_raw_csv_is_parsed_and_described() -> None:
    # A sample in the layout `ncu --csv --page raw --print-units base` writes (ncu's own lines,
    # a header, a units row, thousands separators). Written by hand in that layout, not captured:
    # replace it with a real capture (`collect` on an H100) when a GPU session can make one.
    metrics = ncu.parse_ncu_csv((FIXTURES / "ncu" / "reduce_rows_raw.csv").read_text())
    [launch] = metrics
    assert launch.kernel == "_row_sums"
    assert launch.values["dram__bytes.sum"] == 33570816.0
    assert launch.units["gpu__time_duration.sum"] == "nsecond"
    [line] = ncu.describe_metrics(metrics)
    assert line == ("- _row_sums: 12.3 us duration, DRAM throughput 82% of peak, SM throughput "
                    "18% of peak, achieved occupancy 87%, L2 hit rate 4%, 33.6 MB moved to/from "
                    "DRAM, 29 registers/thread")


def test_ncu_details_csv_is_parsed_too() -> None:
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
              '"Metric Value"')
    row = ('"0","1","python3","h","_row_sums","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0",'
           '"Command line profiler metrics","{}","{}","{}"')
    text = "\n".join(["program output", header,
                      row.format("gpu__time_duration.sum", "usecond", "12.29"),
                      row.format("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%",
                                 "81.6"),
                      row.format("some__other.metric", "", "1")])
    [launch] = ncu.parse_ncu_csv(text)
    assert launch.values == {"gpu__time_duration.sum": 12.29,
                             "dram__throughput.avg.pct_of_peak_sustained_elapsed": 81.6}
    assert ncu.parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_ncu_status_explains_why_it_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "CPU run" in ncu.ncu_status("cpu")[1]
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    assert ncu.ncu_status("cuda") == (False, "Nsight Compute: not collected (no `ncu` on this "
                                             "machine's PATH).")
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/usr/bin/ncu")
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    enabled, note = ncu.ncu_status("cuda")
    assert not enabled and f"set {ncu.NCU_ENV}=1" in note
    monkeypatch.setenv(ncu.NCU_ENV, "1")
    assert ncu.ncu_status("cuda") == (True, "")


def test_the_golden_fixture_is_json_free_text() -> None:
    text = GOLDEN.read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert len(text.splitlines()) < 200  # the prompt stays bounded


def _architecture_note(program: str, family: str) -> str:
    """The bullet of program.md's architecture notes on `family` (e.g. "Hopper"), one line."""
    notes = program[program.index("## 8. Architecture notes"):program.index("## 9.")]
    start = notes.index(f"- **{family}**")
    end = notes.find("\n- **", start + 1)
    return " ".join(notes[start:end if end > 0 else None].split())


def _tb_per_s(gbps: float) -> str:
    return f"{gbps / 1000:.3g}"


def test_program_md_states_the_hardware_facts_of_the_gpu_tables() -> None:
    # program.md's orientation figures come from the same tables as the prompt's GPU section
    # (gpu/database.py, gpu/occupancy.py); a table corrected without the playbook shows here.
    from autokernel.agents.claude_prompt import load_program
    from autokernel.gpu.database import L2_MB

    program = load_program()
    hopper, h100, h200 = sm_limits((9, 0)), GPUS_BY_KEY["h100-sxm"], GPUS_BY_KEY["h200-sxm"]
    ampere, a100s = sm_limits((8, 0)), [g for k, g in GPUS_BY_KEY.items() if k.startswith("a100")]
    ada = sm_limits((8, 9))
    expected = {
        "Hopper": [
            f"{h100.sms} SMs", f"{hopper.shared_bytes // 1024} KB shared memory per SM, up to "
            f"{hopper.max_shared_per_block // 1024} KB per block",
            f"{hopper.max_threads} threads ({hopper.max_warps} warps) and {hopper.max_blocks} "
            "blocks per SM", f"{L2_MB['h100-sxm']:g} MB L2 (H100) or {L2_MB['h200-sxm']:g} MB",
            f"{_tb_per_s(h100.gbps)} TB/s (H100)", f"{_tb_per_s(h200.gbps)} TB/s (H200)",
            f"~{h100.bf16_tflops:.0f} dense fp16/bf16 TFLOP/s, {h100.fp32_tflops:g} fp32"],
        "Ampere": [
            f"{a100s[0].sms} SMs", f"{ampere.shared_bytes // 1024} KB shared memory per SM, up "
            f"to {ampere.max_shared_per_block // 1024} KB per block",
            f"{ampere.max_warps} warps and {ampere.max_blocks} blocks per SM",
            f"{L2_MB['a100-sxm-80gb']:g} MB L2",
            f"{min(g.gbps for g in a100s) / 1000:.1f}-{max(g.gbps for g in a100s) / 1000:.1f} TB/s",
            f"{a100s[0].bf16_tflops:g} dense fp16/bf16 TFLOP/s, TF32 {a100s[0].tf32_tflops:g}",
            f"(FP32 without tensor cores: {a100s[0].fp32_tflops:g})"],
        "Ada": [
            f"{ada.shared_bytes // 1024} KB shared memory per SM "
            f"({ada.max_shared_per_block // 1024} KB per block), {ada.max_warps} warps and "
            f"{ada.max_blocks} blocks per SM",
            f"L4 {GPUS_BY_KEY['l4'].gbps:g} GB/s, L40S {GPUS_BY_KEY['l40s'].gbps:g} GB/s",
            f"({min(L2_MB[k] for k in ('l4', 'l40s', 'rtx-4090')):g}-"
            f"{max(L2_MB[k] for k in ('l4', 'l40s', 'rtx-4090')):g} MB)"],
    }
    for family, facts in expected.items():
        note = _architecture_note(program, family)
        for fact in facts:
            assert fact in note, (family, fact, note)
    registers = {limits.registers for limits in (hopper, ampere, ada)}
    per_thread = {limits.max_registers_per_thread for limits in (hopper, ampere, ada)}
    assert f"{registers.pop()} 32-bit registers per SM and at most {per_thread.pop()} per " \
           "thread" in " ".join(program.split())
