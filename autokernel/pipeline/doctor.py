"""`autokernel doctor`'s checks: is this machine ready? Versions, the GPU and its ceilings,
the toolchain, the candidate sandbox, git and the API key.

`run_checks` makes every check and returns a `DoctorReport`; the CLI only prints it. `ok` is
False when an essential check fails (torch or Triton does not import, the Triton interpreter
computes wrong numbers, git does not run, or on a GPU machine a CUDA op fails); everything else
(gitpython, the API key, the Hopper compile check, the calibration, each layer of the candidate
sandbox) is reported as a warning.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from autokernel.pipeline.options import USAGE_ERROR, PipelineError
from autokernel.text import count_of

SUBPROCESS_TIMEOUT_S = 180  # both probes take ~10 s; a stalled one must not stall doctor


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail" or "info"
    detail: str
    essential: bool = False

    @property
    def failed_essential(self) -> bool:
        return self.essential and self.status == "fail"


def selfcheck(which: str) -> Check:
    """Run `python -m autokernel.selfcheck <which>` under the interpreter; one JSON line back."""
    from autokernel.device import interpreter_env

    name = {"interpreter": "triton interpreter", "aot": "hopper compile (AOT)"}[which]
    essential = which == "interpreter"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "autokernel.selfcheck", which],
            env={**os.environ, **interpreter_env()}, capture_output=True, text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return Check(name, "fail" if essential else "warn",
                     f"timed out after {SUBPROCESS_TIMEOUT_S} s", essential)
    try:
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        ok, detail = bool(outcome["ok"]), str(outcome["detail"])
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        ok, detail = False, f"exit {done.returncode}: {tail[0]}"
    return Check(name, "ok" if ok else ("fail" if essential else "warn"), detail, essential)


def git_checks() -> list[Check]:
    checks = []
    try:
        done = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=30)
        ok = done.returncode == 0
        checks.append(Check("git", "ok" if ok else "fail",
                            done.stdout.strip() if ok else done.stderr.strip(), essential=True))
    except (OSError, subprocess.TimeoutExpired) as exc:
        checks.append(Check("git", "fail", f"cannot run git: {exc}", essential=True))
    try:
        import git  # noqa: F401  (gitpython)

        checks.append(Check("gitpython", "ok", f"gitpython {git.__version__}"))
    except Exception as exc:
        checks.append(Check("gitpython", "warn", f"not importable ({type(exc).__name__})"))
    return checks


def api_key_check() -> Check:
    # Only whether it is set: never its value, its length or any part of it.
    if os.environ.get("ANTHROPIC_API_KEY"):
        return Check("ANTHROPIC_API_KEY", "ok", "set")
    return Check("ANTHROPIC_API_KEY", "warn", "not set (only the claude agent needs it)")


def sandbox_checks() -> tuple[list[Check], dict[str, dict[str, Any]]]:
    """One row per layer of the candidate sandbox (`autokernel.harness.sandbox`): a missing
    layer is a warning, and every bench run's notes say the same."""
    from autokernel.harness import sandbox

    capabilities = sandbox.sandbox_capabilities()
    checks = [Check(f"sandbox {name}", "ok" if cap.available else "warn",
                    cap.detail if cap.available else f"unavailable: {cap.detail}")
              for name, cap in capabilities.items()]
    info = {name: {"available": cap.available, "detail": cap.detail,
                   "protects": sandbox.FEATURES[name]} for name, cap in capabilities.items()}
    if any(capabilities[name].available for name in ("landlock_fs", "seccomp")):
        # Every GPU candidate's first launch builds a launcher with the C compiler, inside.
        works, detail = sandbox.toolchain_check()
        checks.append(Check("sandbox toolchain", "ok" if works else "fail", detail))
    return checks, info


def gpu_report(device_index: int, calibrate: bool | None) -> tuple[list[Check], dict[str, Any]]:
    import torch

    from autokernel.gpu.calibrate import cache_path, get_ceilings
    from autokernel.gpu.database import OverrideError, detect_gpu

    info: dict[str, Any] = {"gpu": None, "datasheet": None, "ceilings": None}
    if not torch.cuda.is_available():
        no_gpu = Check("gpu", "info", "no GPU: kernels run on the CPU in the Triton interpreter")
        return [no_gpu], info
    checks = []
    props = torch.cuda.get_device_properties(device_index)
    info["gpu"] = {"index": device_index, "name": props.name,
                   "compute_capability": [props.major, props.minor],
                   "sms": props.multi_processor_count,
                   "memory_gib": round(props.total_memory / 2**30, 1)}
    checks.append(Check("gpu", "ok", f"{props.name}, compute capability {props.major}.{props.minor}"
                                     f", {props.multi_processor_count} SMs, "
                                     f"{props.total_memory / 2**30:.1f} GiB"))
    try:
        probe = torch.arange(1024, device=f"cuda:{device_index}", dtype=torch.float32)
        ok = probe.sum().item() == 1023 * 1024 / 2
        checks.append(Check("cuda op", "ok" if ok else "fail",
                            "a reduction on the GPU gives the right sum" if ok else
                            "a reduction on the GPU gave a wrong sum", essential=True))
    except Exception as exc:
        checks.append(Check("cuda op", "fail", f"{type(exc).__name__}: {exc}", essential=True))
        return checks, info

    try:
        spec = detect_gpu(device_index)
    except OverrideError as exc:
        checks.append(Check("datasheet", "fail", str(exc), essential=True))
        spec = None
    else:
        if spec is None:
            checks.append(Check("datasheet", "warn",
                                "GPU not in the table and not estimable: set "
                                "AUTOKERNEL_GPU_PEAKS=bf16_tflops=...,gbps=..."))
        else:
            info["datasheet"] = asdict(spec)
            tf32 = f"{spec.tf32_tflops:g}" if spec.tf32_tflops else "-"
            kind = "estimate" if spec.estimated else "datasheet"
            checks.append(Check(
                "datasheet", "warn" if spec.estimated else "ok",
                f"{spec.name} ({kind}): bf16 {spec.bf16_tflops:g} / fp16 {spec.fp16_tflops:g} / "
                f"tf32 {tf32} / fp32 {spec.fp32_tflops:g} TFLOP/s dense, {spec.gbps:g} GB/s. "
                f"Source: {spec.source}"))

    try:
        ceilings = get_ceilings(device_index, recalibrate=calibrate is True,
                                allow_measure=calibrate is not False)
    except Exception as exc:
        checks.append(Check("measured ceilings", "warn", f"calibration failed: "
                                                         f"{type(exc).__name__}: {exc}"))
        return checks, info
    if ceilings is None:
        checks.append(Check("measured ceilings", "warn",
                            f"none cached in {cache_path()}; run `autokernel doctor --calibrate`"))
        return checks, info
    info["ceilings"] = asdict(ceilings)
    share = ""
    if spec is not None:
        share = (f" ({ceilings.gbps / spec.gbps:.0%} and "
                 f"{ceilings.bf16_tflops / spec.bf16_tflops:.0%} of datasheet)")
    checks.append(Check("measured ceilings", "ok",
                        f"copy {ceilings.gbps:.0f} GB/s, bf16 GEMM {ceilings.bf16_tflops:.0f} "
                        f"TFLOP/s{share}; measured {ceilings.measured_at}"))
    return checks, info


def versions_check() -> tuple[list[Check], dict[str, str]]:
    from autokernel import __version__

    versions = {"autokernel": __version__, "python": platform.python_version()}
    checks = [Check("python", "ok" if sys.version_info >= (3, 10) else "fail",
                    f"{versions['python']} ({sys.executable})", essential=True)]
    try:
        import torch

        runtime = (f"HIP {torch.version.hip}" if torch.version.hip else
                   f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build")
        versions["torch"] = torch.__version__
        checks.append(Check("torch", "ok", f"{torch.__version__} ({runtime})", essential=True))
    except Exception as exc:
        checks.append(Check("torch", "fail", f"import failed: {exc}", essential=True))
    try:
        import triton

        versions["triton"] = triton.__version__
        checks.append(Check("triton", "ok", triton.__version__, essential=True))
    except Exception as exc:
        checks.append(Check("triton", "fail", f"import failed: {exc}", essential=True))
    return checks, versions


@dataclass
class DoctorReport:
    checks: list[Check]
    versions: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)  # gpu, datasheet, ceilings, sandbox

    @property
    def ok(self) -> bool:
        return not any(c.failed_essential for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "versions": self.versions, **self.info,
                "checks": [asdict(c) for c in self.checks]}


def run_checks(gpu: int = 0, calibrate: bool | None = None, aot: bool = True) -> DoctorReport:
    """Every check, in the order doctor shows them. Raises PipelineError for a GPU index the
    machine does not have."""
    checks, versions = versions_check()
    info: dict[str, Any] = {"gpu": None, "datasheet": None, "ceilings": None}
    if not any(c.failed_essential for c in checks):
        import torch

        if torch.cuda.is_available() and gpu >= torch.cuda.device_count():
            raise PipelineError(f"--gpu {gpu}: only "
                                f"{count_of(torch.cuda.device_count(), 'GPU')} visible",
                                USAGE_ERROR)
        gpu_checks, info = gpu_report(gpu, calibrate)
        checks += gpu_checks
        checks.append(selfcheck("interpreter"))
        if aot:
            checks.append(selfcheck("aot"))
    sandbox_rows, sandbox_info = sandbox_checks()
    checks += sandbox_rows
    checks += git_checks()
    checks.append(api_key_check())
    return DoctorReport(checks, versions, {**info, "sandbox": sandbox_info})
