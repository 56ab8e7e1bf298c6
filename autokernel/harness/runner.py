"""`run_bench`: judge one kernel file, from the harness process, without ever importing it.

The harness process reads the file as text (format check, static scan), then spawns a fresh
worker (`autokernel.harness.worker`) for everything that executes it. The worker splits itself
into the judge (references, tolerances, the verdict) and, below it, the candidate process, the
only one that imports the kernel. How the worker is started, in which environment and working
directory, and how its output comes back: `autokernel.harness.spawn`.

Then this process turns the worker's raw timings into throughput and % of peak (through
`autokernel.gpu.roofline`, the one place that computes them), quarantines impossible results, and
caches the compiled-stock timings for the next call.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from autokernel.files import atomic_write_text
from autokernel.harness.protocol import (
    ChannelError, Job, WorkerReport, decode_report,
)
from autokernel.harness.result import BenchResult, ShapeTiming, Status
from autokernel.harness.seeds import new_master
from autokernel.harness.spawn import candidate_env, default_cache_dir, spawn_worker
from autokernel.harness.untrusted import candidate_text
from autokernel.harness.verdict import DETAIL_CHARS

DEFAULT_TIMEOUT_S = 600.0
# Judge-measured compile baselines. A new name: the old file held figures that a candidate
# process reported, and none of them is read again.
BASELINE_CACHE_FILE = "harness-baselines-judged.json"
# What a candidate process may leave in its directory (its private caches, temporary files):
# past this, the verdict is REJECTED (rule write-quota). Each file is also capped by setrlimit.
WRITE_QUOTA_BYTES = 2 * 2**30


class BenchInputError(ValueError):
    """The caller asked for something impossible (no such file, unknown shape or dtype)."""


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_lines(text: str, count: int = 3, width: int = 600) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return candidate_text(" | ".join(lines[-count:])[-width:], width)


def _bytes_under(path: Path) -> int:
    total = 0
    for child in path.rglob("*"):
        try:
            if child.is_file() and not child.is_symlink():
                total += child.stat().st_size
        except OSError:
            continue
    return total


# -- baseline cache --------------------------------------------------------------------------------

def read_baseline_cache(cache_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((cache_dir / BASELINE_CACHE_FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_baseline_cache(cache_dir: Path, new_entries: dict[str, dict[str, Any]]) -> None:
    if not new_entries:
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    entries = read_baseline_cache(cache_dir)
    entries.update(new_entries)
    text = json.dumps(entries, indent=1, sort_keys=True)
    atomic_write_text(cache_dir / BASELINE_CACHE_FILE, text)


# -- turning a report into a BenchResult ----------------------------------------------------------

def _gpu_objects(report: WorkerReport) -> tuple[Any, Any]:
    from autokernel.gpu.calibrate import Ceilings
    from autokernel.gpu.database import GPUSpec

    gpu = ceilings = None
    if report.gpu_spec:
        data = dict(report.gpu_spec)
        for key in ("compute_capability", "torch_names"):
            if isinstance(data.get(key), list):
                data[key] = tuple(data[key])
        gpu = GPUSpec(**data)
    if report.ceilings:
        ceilings = Ceilings(**report.ceilings)
    return gpu, ceilings


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def apply_report(result: BenchResult, report: WorkerReport, spec: Any, device: str) -> None:
    """Fill `result` from the worker's report: verdict, timings, roofline, plausibility."""
    from autokernel.gpu.roofline import roofline
    from autokernel.harness.paired import paired_speedup, round_ratios
    from autokernel.harness.timing import impossible_reason
    from autokernel.ops.spec import parse_dtype

    result.status = Status(report.status)
    result.stage, result.reason, result.rule = report.stage, report.reason, report.rule
    result.detail = report.detail
    result.stages = {**result.stages, **report.stages}  # static_scan first, then the worker's
    result.stage_cases = dict(report.stage_cases)
    result.peak_vram_mb = report.peak_vram_mb
    result.gpu = report.device_name or None
    result.torch_version, result.triton_version = report.torch_version, report.triton_version
    result.notes.extend(report.notes)
    result.phase_seconds = {**result.phase_seconds, **report.phase_seconds}  # a CUDA build first
    result.sandbox = dict(report.sandbox)
    result.launch_digest = report.launch_digest
    result.incumbent_launch_digest = report.incumbent_launch_digest
    gpu, ceilings = _gpu_objects(report) if device == "cuda" else (None, None)

    for timed in report.timings:
        shape, dtype = tuple(timed.shape), parse_dtype(timed.dtype)
        line = roofline(spec, shape, dtype, timed.latency_us, gpu, ceilings)
        ratios = round_ratios(timed.incumbent_rounds_us, timed.candidate_rounds_us)
        paired = paired_speedup([ratios]) if ratios else None
        result.timings.append(ShapeTiming(
            shape=list(shape), dtype=timed.dtype, latency_us=timed.latency_us,
            iqr_us=timed.iqr_us, eager_us=timed.eager_us, compile_us=timed.compile_us,
            tflops=line.tflops, gbps=line.gbps, pct_peak_datasheet=line.pct_peak_datasheet,
            pct_peak_measured=line.pct_peak_measured, samples=timed.samples,
            calls_per_round=timed.calls_per_round,
            eager_iqr_us=timed.eager_iqr_us, compile_iqr_us=timed.compile_iqr_us,
            compile_cached=timed.compile_cached,
            speedup_vs_eager=_ratio(timed.eager_us, timed.latency_us),
            speedup_vs_compile=_ratio(timed.compile_us, timed.latency_us),
            throughput=line.throughput, throughput_unit=line.throughput_unit,
            launch_us=timed.launch_us, eager_launch_us=timed.eager_launch_us,
            compile_launch_us=timed.compile_launch_us, incumbent_us=timed.incumbent_us,
            incumbent_launch_us=timed.incumbent_launch_us, paired_ratios=ratios,
            vs_incumbent=paired.estimate if paired else None,
            vs_incumbent_lo=paired.low if paired else None,
            vs_incumbent_hi=paired.high if paired else None, retimed=timed.retimed,
            liger_us=timed.liger_us, speedup_vs_liger=_ratio(timed.liger_us, timed.latency_us),
        ))
    if any(t.compile_cached for t in result.timings):
        result.notes.append("torch.compile latency from this run's baseline cache (measured "
                            "interleaved with the candidate in an earlier call)")

    if device != "cuda":
        result.timing_meaningful = False
        return
    if result.status is not Status.PASS:
        return
    for timing in result.timings:
        baselines = [t for t in (timing.eager_us, timing.compile_us) if t]
        reason = impossible_reason(timing.latency_us, timing.pct_peak_datasheet,
                                   min(baselines) if baselines else None)
        if reason is not None:
            result.status, result.stage, result.rule = Status.REJECTED, "timing", "impossible"
            where = f"{spec.format_shape(tuple(timing.shape))} {timing.dtype}"
            result.reason = f"{reason} at {where}; quarantined for a person to look at"
            return


def _build(result: BenchResult, info: Any, path: Path, device: str, caches: Path,
           timeout_s: float) -> dict[str, list[list[str]]] | None:
    """The kernel file built by its backend in this trusted process, after its static scan and
    before anything of it runs: what the candidate process loads ({} when the backend builds
    nothing ahead), or None with `result` finished (SKIPPED on a device the backend cannot run
    on, a CRASH at stage "build" with the compiler's first lines)."""
    from autokernel.backends import backend
    from autokernel.backends.interface import BuildError

    chosen = backend(info.backend)
    if device == "cpu" and chosen.cpu_refusal:
        result.status, result.stage, result.reason = Status.SKIPPED, "device", chosen.cpu_refusal
        return None
    try:
        built = chosen.build(info, path, caches, timeout_s)
    except BuildError as exc:
        result.status, result.stage = Status.CRASH, "build"
        result.reason, result.detail = str(exc), exc.detail
        return None
    if built is None:
        return {}
    result.phase_seconds["build"] = built.seconds
    result.stages["build"] = "pass"
    result.notes.append(f"built for {built.target} in {built.seconds:.1f} s"
                        + (" (cached)" if built.cached else ""))
    return {chosen.name: built.entries}


def _incumbent_build(incumbent: Path, caches: Path, timeout_s: float,
                     notes: list[str]) -> dict[str, list[list[str]]]:
    """What the incumbent's process loads when its backend builds ahead (it passed before, so
    its build is usually cached); a failure costs the paired comparison, which the notes say."""
    from autokernel.backends import backend
    from autokernel.backends.interface import BuildError
    from autokernel.kernelfile import KernelFileError, parse_kernel_source

    try:
        info = parse_kernel_source(incumbent.read_text(encoding="utf-8"))
        chosen = backend(info.backend)
        built = chosen.build(info, incumbent, caches, timeout_s)
    except (OSError, KernelFileError, BuildError) as exc:
        notes.append(f"the incumbent's build failed, so it cannot load: {str(exc)[:200]}")
        return {}
    return {chosen.name: built.entries} if built is not None else {}


def _gate_on_gpu_compile(result: BenchResult, report: WorkerReport, source: str,
                         env: dict[str, str]) -> None:
    """On the CPU, a PASS stands only if every correctness call's launches lower for sm_90."""
    from autokernel.harness.aot_gate import check

    started = time.perf_counter()
    if not report.aot_requests:
        problem: str | None = "no Triton launch was recorded to compile for sm_90"
    else:
        with tempfile.TemporaryDirectory(prefix="autokernel-aot-") as tmp:
            problem = check(source, report.aot_requests, Path(tmp), env)
    result.phase_seconds["gpu_compile"] = round(time.perf_counter() - started, 3)
    if problem is not None:
        result.status, result.stage, result.rule = Status.FAIL, "gpu_compile", "gpu-compile"
        result.reason = candidate_text(problem)
        result.stages["gpu_compile"] = "fail"
    else:
        result.stages["gpu_compile"] = "pass"


# -- the API --------------------------------------------------------------------------------------

def run_bench(
    kernel_path: str | Path,
    *,
    device: str = "cuda",
    shapes: list[Any] | None = None,
    dtypes: list[Any] | None = None,
    correctness_dtypes: list[Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cache_dir: str | Path | None = None,
    model_shapes: list[Any] | None = None,
    params: dict[str, Any] | None = None,
    quick: bool = False,
    timing_budget_s: float = 1.0,
    static_scan: bool = True,
    incumbent: str | Path | None = None,
    min_gain: float = 0.01,
    correctness_only: bool = False,
    only_stages: list[str] | None = None,
) -> BenchResult:
    """Judge one kernel file: static scan, five correctness stages, anti-cheat, timing.

    - `shapes`: timed shapes ("4096x4096" or tuples), primary first; default: the registry's first
      bench shape (on the CPU interpreter, the middle of the CPU sweep). They join the sweep.
    - `dtypes`: timed dtypes; default fp16 on cuda, fp32 on cpu.
    - `correctness_dtypes`: dtypes of the correctness stages; default every dtype of the op.
    - `model_shapes`: the profiled model's shapes, added to the shape sweep.
    - `params`: extra op parameters for the input generator (e.g. {"eps": 1e-5}).
    - `cache_dir`: where compiled-stock timings and Triton/Inductor caches persist across calls.
    - `quick`: fewer sweep and edge shapes (every detector still runs); for tests.
    - `static_scan=False` skips the AST scan, to exercise the dynamic detectors alone (tests).
    - `incumbent`: the current best kernel file, timed in the same rounds as this one (paired A/B:
      `vs_incumbent` with its 95% interval); `min_gain`: a paired interval that straddles
      1 + min_gain and is wide is re-timed once with more rounds.
    - `correctness_only`: every correctness and anti-cheat stage in the same sandboxed worker,
      then no baselines, no timing and, on the CPU, no sm_90 compile gate (a draft's check, for
      the claude agent's test_kernel; its compile_kernel tool compiles the draft).
    - `only_stages`: tests only, the correctness stages to run (e.g. ["smoke"]); the others
      say "skip" in `stages` and a note says the verdict is partial.

    Raises BenchInputError for a missing file or an impossible shape or dtype; every judgement
    of the kernel itself, including "not a kernel file", is a BenchResult.
    """
    from autokernel.harness.cases import default_timing_dtypes, default_timing_shapes
    from autokernel.backends import backend
    from autokernel.harness.static_scan import coding_problem, scan_source, summarize
    from autokernel.kernelfile import KernelFileError, parse_kernel_source
    from autokernel.ops import get_spec
    from autokernel.ops.spec import dtype_name, parse_dtype

    started = time.perf_counter()
    if device not in ("cuda", "cpu"):
        raise BenchInputError(f"unknown device {device!r}; choose cuda or cpu")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BenchInputError("device cuda was asked for, but no CUDA GPU is visible")
    path = Path(kernel_path)
    if not path.is_file():
        raise BenchInputError(f"no such kernel file: {path}")
    if incumbent is not None and not Path(incumbent).is_file():
        raise BenchInputError(f"no such incumbent kernel file: {incumbent}")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchInputError(f"cannot read {path}: {exc}") from exc

    def finish(result: BenchResult) -> BenchResult:
        result.harness_seconds = round(time.perf_counter() - started, 3)
        return result

    try:
        info = parse_kernel_source(source)
    except KernelFileError as exc:
        return finish(BenchResult(status=Status.REJECTED, stage="static_scan",
                                  reason=f"not a valid kernel file: {exc}", rule="kernel-format",
                                  device=device, stages={"static_scan": "fail"}))
    coding = coding_problem(source)
    if coding is not None:  # with or without the scan: Python must run the text that is judged
        return finish(BenchResult(status=Status.REJECTED, stage="static_scan",
                                  reason=f"not a valid kernel file: it {coding}", rule="encoding",
                                  device=device, stages={"static_scan": "fail"}))
    spec = get_spec(info.kernel_type)
    try:
        timing_shapes = ([spec.parse_shape(s) for s in shapes] if shapes
                         else default_timing_shapes(spec, device))
        extra_shapes = [spec.parse_shape(s) for s in (model_shapes or [])]
        timing_dtypes = ([parse_dtype(d) for d in dtypes] if dtypes
                         else default_timing_dtypes(spec, device))
        checked_dtypes = ([parse_dtype(d) for d in correctness_dtypes] if correctness_dtypes
                          else list(spec.dtypes))
    except ValueError as exc:
        raise BenchInputError(str(exc)) from exc
    unsupported = [dtype_name(d) for d in (*timing_dtypes, *checked_dtypes) if d not in spec.dtypes]
    if unsupported:
        raise BenchInputError(f"{spec.name} does not support {', '.join(unsupported)}; it "
                              f"supports {', '.join(dtype_name(d) for d in spec.dtypes)}")
    for dtype in timing_dtypes:  # timed dtypes are always checked for correctness too
        if dtype not in checked_dtypes:
            checked_dtypes.append(dtype)

    result = BenchResult(
        status=Status.PASS, kernel_type=info.kernel_type, backend=info.backend, device=device,
        shapes=[list(s) for s in timing_shapes], dtypes=[dtype_name(d) for d in timing_dtypes],
        correctness_dtypes=[dtype_name(d) for d in checked_dtypes],
        timing_meaningful=device == "cuda",
    )
    try:  # a source file the kernel file names (a CUDA_FILE), for the scan
        sidecar_text = backend(info.backend).sidecar_text(info, path)
    except KernelFileError as exc:
        result.status, result.stage, result.rule = Status.REJECTED, "static_scan", "kernel-format"
        result.reason = f"not a valid kernel file: {exc}"
        return finish(result)
    if static_scan:
        violations = scan_source(source, sidecar_text)
        if violations:
            result.status, result.stage = Status.REJECTED, "static_scan"
            result.rule, result.reason = violations[0].rule, "static scan: " + summarize(violations)
            result.stages = {"static_scan": "fail"}
            return finish(result)
        result.stages["static_scan"] = "pass"
    else:
        result.stages["static_scan"] = "skip"
        result.notes.append("static scan skipped (dynamic detectors only)")

    caches = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    caches.mkdir(parents=True, exist_ok=True)
    prebuilt = _build(result, info, path, device, caches, timeout_s)
    if prebuilt is None:
        return finish(result)
    if incumbent is not None and device == "cuda":
        for name, entries in _incumbent_build(Path(incumbent), caches, timeout_s,
                                              result.notes).items():
            prebuilt[name] = prebuilt.get(name, []) + entries
    cached = {k: v for k, v in read_baseline_cache(caches).items()
              if k.startswith(f"{info.kernel_type}|")}
    workdir = Path(tempfile.mkdtemp(prefix="autokernel-bench-"))
    try:
        # Each candidate process reads and writes only its own directory (the sandbox).
        (workdir / "candidate").mkdir()
        kernel_copy = workdir / "candidate" / "kernel.py"
        kernel_copy.write_text(source, encoding="utf-8")
        incumbent_copy = None
        if incumbent is not None:
            (workdir / "incumbent").mkdir()
            incumbent_copy = workdir / "incumbent" / "kernel.py"
            incumbent_copy.write_text(Path(incumbent).read_text(encoding="utf-8"),
                                      encoding="utf-8")
        job = Job(
            kernel_path=str(kernel_copy), kernel_type=info.kernel_type, device=device,
            timing_shapes=[list(s) for s in timing_shapes],
            timing_dtypes=[dtype_name(d) for d in timing_dtypes],
            correctness_dtypes=[dtype_name(d) for d in checked_dtypes],
            model_shapes=[list(s) for s in extra_shapes], params=dict(params or {}),
            seed=new_master(), nonce=secrets.token_hex(16), result_fd=-1,
            quick=quick, timing_budget_s=timing_budget_s, cached_baselines=cached,
            incumbent_path=str(incumbent_copy) if incumbent_copy is not None else None,
            min_gain=min_gain, correctness_only=correctness_only, prebuilt=prebuilt,
            only_stages=only_stages,
        )
        env = candidate_env(device, workdir, caches)
        spawned = time.perf_counter()
        returncode, raw, output_tail, timed_out = spawn_worker(job, env, workdir, timeout_s)
        worker_seconds = time.perf_counter() - spawned
        written = max((_bytes_under(workdir / role) for role in ("candidate", "incumbent")
                       if (workdir / role).is_dir()), default=0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if timed_out:
        result.status, result.stage = Status.TIMEOUT, "timeout"
        result.reason = (f"no verdict within {timeout_s:g} s; the worker's process group was "
                         "killed")
        return finish(result)
    try:
        report = decode_report(raw, job.nonce)
    except ChannelError as exc:
        result.status, result.stage, result.rule = Status.REJECTED, "worker", "result-channel"
        result.reason = f"the result channel was tampered with: {exc}"
        return finish(result)
    if report is None:
        result.status, result.stage = Status.CRASH, "worker"
        if returncode is not None and returncode < 0:
            result.reason = f"worker killed by {_signal_name(returncode)}"
        else:
            result.reason = f"worker exited with status {returncode} before giving a verdict"
        if output_tail.strip():
            result.reason += f": {_last_lines(output_tail)}"
            result.detail = candidate_text(output_tail[-DETAIL_CHARS:], DETAIL_CHARS)
        return finish(result)
    apply_report(result, report, spec, device)
    if only_stages is not None:
        result.notes.append(f"a partial verdict: only {', '.join(only_stages)} of the "
                            "correctness stages ran")
    if report.stage == "worker" and output_tail.strip():  # the candidate process died
        result.reason += f": {_last_lines(output_tail)}"
        result.detail = candidate_text(output_tail[-DETAIL_CHARS:], DETAIL_CHARS)
    if device == "cpu" and result.status is Status.PASS and correctness_only:
        # A draft's check, never a keep: the agent's compile_kernel tool compiles it for sm_90,
        # and the experiment's own bench gates its PASS.
        result.stages["gpu_compile"] = "skip"
        result.notes.append("the sm_90 compile check is left to the experiment's own bench")
    elif device == "cpu" and result.status is Status.PASS:
        _gate_on_gpu_compile(result, report, source, env)
    if written > WRITE_QUOTA_BYTES and result.status is Status.PASS:
        result.status, result.stage, result.rule = Status.REJECTED, "worker", "write-quota"
        result.reason = (f"a candidate process left {written / 2**30:.1f} GiB in its "
                         f"directory, past the {WRITE_QUOTA_BYTES / 2**30:.0f} GiB write quota")
    # What the worker's own phases do not cover: interpreter start, imports, CUDA init, exit.
    startup = worker_seconds - sum(report.phase_seconds.values())
    result.phase_seconds = {"startup": round(startup, 3), **result.phase_seconds}
    # Only the judge's own measurements (judge_timing), never a figure a candidate process sent.
    write_baseline_cache(caches, report.new_baselines)
    return finish(result)

