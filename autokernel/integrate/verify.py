"""`autokernel verify DIR`: the run's kernels spliced into its model, checked and timed end to end.

1. Load the run's model copy with the shared loader (same class, dtype, seed and inputs as the
   run), and the finished kernels as custom ops. The patched model and the oracle are built
   again from a fresh import of the file, with the original's weights: a deep copy would share
   whatever the model holds outside its module tree (minGPT's `self.mlpf = lambda x: ...` over
   its layers would keep calling the original's, unpatched and in the original's dtype).
2. Accuracy. A model's output in fp16 differs from its exact value by accumulated rounding, which
   grows with depth, so a fixed elementwise tolerance is either too tight for a deep model or too
   loose for a shallow one. The yardstick is the original model itself: both models are compared
   against an oracle (the same model in float64 for an fp32 run, float32 with full-precision
   matmuls for fp16/bf16), and the patched model passes when its relative error (L2 over each
   output tensor, the largest over tensors) is at most ERROR_GROWTH = 2× the original's plus a
   floor of a few units of the dtype's precision (ERROR_FLOOR): "no less accurate than PyTorch
   in this dtype", whatever the depth. A broken kernel is off by O(1), far outside. The same rule
   checks the parameter gradients of a random projection of the outputs, through each kernel's
   backward.
3. Latency: eager, torch.compile, patched eager and patched torch.compile, each the median wall
   time of one forward bracketed by synchronize, over interleaved rounds
   (`autokernel.harness.timing.time_synchronous_calls`: rotating order, L2 flushed between
   calls). This is what an eager model pays per forward, host launch time included: the
   real-model effect of the kernels' device time and their launch cost together. The measured end-to-end speedup is
   printed next to the Amdahl estimate from the plan's shares and the kernels' measured speedups,
   and a disagreement larger than the noise (the combined relative IQR of the two timings) is
   called out.

Everything lands in `verify.json` in the workspace (which `autokernel report` reads). Verify never
ends in a traceback: a patched model whose forward raises is a FAIL with the reason; what stops
the check before the kernels run is a one-line error (`loader.RunError`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.versions import software_versions

# How verify patches its model, as patch() does by default: under torch.compile the kernels step
# aside and Inductor compiles the original ops (recorded in the result, said in its lines).
PATCH_UNDER_COMPILE = "inductor"

if TYPE_CHECKING:
    import torch
    from rich.console import Console
    from torch import nn

    from autokernel.integrate.loader import FinishedRun
    from autokernel.integrate.patch import PatchReport

VERIFY_FILE = "verify.json"
ERROR_GROWTH = 2.0
# Relative-error floor per dtype: 4 units of roundoff for fp16 (2^-11) and bf16 (2^-8); for fp32,
# where the original's own error can be ~1e-7, 1e-6 absorbs summation-order differences.
ERROR_FLOOR = {"fp16": 2e-3, "bf16": 1.6e-2, "fp32": 1e-6}
GRADIENT_FLOOR = {"fp16": 1e-2, "bf16": 6e-2, "fp32": 1e-5}
WARMUP_CALLS = 3  # on a GPU; one on the CPU, where timings mean nothing anyway
DEFAULT_BUDGET_S = 20.0
CPU_TIMING_NOTE = ("device cpu: the kernels run in the Triton interpreter, so these latencies say "
                   "nothing about a GPU")


# ---------------------------------------------------------------------------------------------
# Accuracy


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a forward's output (tensor, tuple, dict, ModelOutput...)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output)
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def relative_error(values: list[torch.Tensor], exact: list[torch.Tensor]) -> float:
    """max over tensors of ||values - exact||₂ / ||exact||₂ (absolute where exact is all 0)."""
    import torch

    if len(values) != len(exact):
        return math.inf
    worst = 0.0
    for a, b in zip(values, exact):
        if a.shape != b.shape:
            return math.inf
        a64, b64 = a.detach().double(), b.detach().double()
        if not torch.isfinite(a64).all():
            return math.inf if torch.isfinite(b64).all() else math.nan
        scale = b64.norm().item()
        error = (a64 - b64).norm().item()
        worst = max(worst, error / scale if scale > 0 else error)
    return worst


@dataclass
class Agreement:
    """The patched model's error against the oracle's, next to the original model's."""

    error_original: float
    error_patched: float
    bound: float
    difference: float  # patched vs original, relative
    max_abs_difference: float
    oracle: str

    @property
    def passed(self) -> bool:
        return self.error_patched <= self.bound

    def to_dict(self) -> dict[str, Any]:
        return {"error_original": self.error_original, "error_patched": self.error_patched,
                "bound": self.bound, "difference": self.difference,
                "max_abs_difference": self.max_abs_difference, "oracle": self.oracle,
                "rule": f"error_patched <= {ERROR_GROWTH:g} x error_original + floor",
                "passed": self.passed}


def agreement(original: list[torch.Tensor], patched: list[torch.Tensor],
              oracle: list[torch.Tensor], floor: float, oracle_name: str) -> Agreement:
    error_original = relative_error(original, oracle)
    error_patched = relative_error(patched, oracle)
    max_abs = max(((a.double() - b.double()).abs().max().item()
                   for a, b in zip(patched, original) if a.shape == b.shape and a.numel()),
                  default=0.0)
    return Agreement(error_original, error_patched, ERROR_GROWTH * error_original + floor,
                     relative_error(patched, original), max_abs, oracle_name)


def oracle_dtype(dtype: torch.dtype) -> torch.dtype:
    import torch

    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


@contextmanager
def full_precision() -> Any:
    """Matmuls in true fp32 (no TF32) while the oracle runs, whatever the user's setting."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def cast_inputs(inputs: Any, dtype: torch.dtype) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor)
                    and t.is_floating_point() else t, inputs)


def projection_loss(output: Any, weights: list[torch.Tensor]) -> torch.Tensor:
    """Σ <output_i, w_i>: every output element gets a gradient (a random direction)."""
    tensors = output_tensors(output)
    return sum((t.double() * w).sum() for t, w in zip(tensors, weights))


def parameter_gradients(model: nn.Module, inputs: Any, weights: list[torch.Tensor]
                        ) -> list[torch.Tensor]:
    import torch

    from autokernel.profiling.model_loader import call_forward

    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        projection_loss(call_forward(model, inputs), weights).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()
             if p.requires_grad and p.grad is not None]
    model.zero_grad(set_to_none=True)
    return grads


# ---------------------------------------------------------------------------------------------
# Timing


@dataclass
class Timing:
    name: str
    median_us: float
    iqr_us: float
    samples: int

    @property
    def relative_iqr(self) -> float:
        return self.iqr_us / self.median_us if self.median_us else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "iqr_us": self.iqr_us, "samples": self.samples}


def time_contestants(contestants: dict[str, Callable[[], Any]], device: torch.device,
                     rounds: int | None, budget_s: float) -> tuple[dict[str, Timing], int]:
    """Median and IQR of each contestant with the harness's interleaved protocol."""
    from autokernel.harness.timing import (
        host_seconds, make_flush_buffer, rounds_for, time_synchronous_calls,
    )

    if rounds is None:
        round_s = sum(host_seconds(fn, device) for fn in contestants.values())
        rounds = rounds_for(budget_s, round_s, device, quick=False)
    samples = time_synchronous_calls([(name, fn) for name, fn in contestants.items()], rounds,
                                     device, make_flush_buffer(device))
    return {name: Timing(name, s.median_us, s.iqr_us, len(s.latency_us))
            for name, s in samples.items()}, rounds


def combined_amdahl(parts: list[tuple[float, float]]) -> float | None:
    """End-to-end speedup when each share s of the time runs k× faster: 1/((1-Σs) + Σ s/k)."""
    if not parts or any(k is None or k <= 0 for _, k in parts):
        return None
    shares = sum(s for s, _ in parts)
    remaining = max(0.0, 1.0 - shares) + sum(s / k for s, k in parts)
    return 1.0 / remaining if remaining > 0 else None


# ---------------------------------------------------------------------------------------------
# The check


@dataclass
class VerifyOptions:
    device: str
    iters: int | None = None  # timed rounds; None: as many as the budget allows (≥20 on a GPU)
    compile: bool = True
    gradients: bool = True
    budget_s: float = DEFAULT_BUDGET_S
    compile_backend: str = "inductor"


@dataclass
class VerifyLog:
    """Progress lines for the user while verify runs (printed by the CLI)."""

    emit: Callable[[str], None] = print
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.emit(f"note: {text}")


def _kernel_rows(run: FinishedRun, manifest: list[dict[str, Any]], report: PatchReport,
                 calls: dict[str, int]) -> list[dict[str, Any]]:
    rows = []
    for entry in manifest:
        stats = report.kernels[entry["tag"]].to_dict()
        rows.append({
            "tag": entry["tag"], "kernel_type": entry["kernel_type"], "file": entry["file"],
            "backward": stats["backward"], "backward_description": stats["backward_description"],
            "role": entry.get("role", ""), "modules": stats["modules"],
            "scopes": stats["scopes"], "functions": stats["functions"],
            "skipped": stats["skipped"],
            "calls_per_forward": calls.get(entry["tag"], 0), "fallbacks": stats["fallbacks"],
            "share": entry["share"], "speedup_vs_eager": entry["speedup_vs_eager"],
            "speedup_vs_compile": entry["speedup_vs_compile"],
            "best_experiment": entry["best_experiment"],
        })
    return rows


def host_cost(run: FinishedRun, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The host time the routed calls add per forward, from the harness's launch figures of each
    best kernel (one synchronous call's wall time minus its device time) against eager PyTorch's.

    A separate figure from the device-time speedups the Amdahl estimate uses: in a forward that
    is host-bound (eager's launches take longer than its kernels), this is what a kernel that is
    faster on the device can still cost. The routing's own Python is not in it."""
    best = {t.tag: t.best_result or {} for t in run.state.targets}
    parts, total = [], 0.0
    for row in rows:
        verdict = best.get(row["tag"], {})
        launch, eager = verdict.get("launch_us"), verdict.get("eager_launch_us")
        if row["calls_per_forward"] <= 0 or launch is None or eager is None:
            continue
        added = row["calls_per_forward"] * (launch - eager)
        total += added
        parts.append({"tag": row["tag"], "calls": row["calls_per_forward"],
                      "launch_us": launch, "eager_launch_us": eager, "added_us": added})
    return {"added_us_per_forward": total if parts else None, "parts": parts}


def host_cost_line(host: dict[str, Any]) -> str | None:
    if host.get("added_us_per_forward") is None:
        return None
    detail = "; ".join(f"{p['tag']}: {p['calls']} × ({p['launch_us']:.1f} − "
                       f"{p['eager_launch_us']:.1f}) µs" for p in host["parts"])
    return (f"host launch cost of the routed calls vs eager's: "
            f"{host['added_us_per_forward']:+.1f} µs per forward ({detail}; the harness's launch "
            "figures, routing not included): where eager's forward is host-bound, this is paid "
            "in full")


def amdahl_check(parts: list[dict[str, Any]], measured: float | None, noise: float | None,
                 meaningful: bool) -> dict[str, Any]:
    """The Amdahl estimate from the routed kernels' shares and speedups, against the measured
    end-to-end speedup: they agree when they differ by no more than the noise (relative IQR)."""
    estimate = combined_amdahl([(p["share"], p["kernel_speedup"]) for p in parts])
    result: dict[str, Any] = {"estimate_vs_eager": estimate, "parts": parts,
                              "measured_vs_eager": measured, "noise": noise, "agrees": None,
                              "message": ""}
    if estimate is None or measured is None:
        result["message"] = "no Amdahl estimate: " + (
            "no kernel was routed" if not parts else "no end-to-end timing" if measured is None
            else "a routed kernel has no measured speedup")
        return result
    difference = measured / estimate - 1.0
    result["difference"] = difference
    if not meaningful:
        result["message"] = "not compared on the CPU interpreter"
        return result
    noise = noise or 0.0
    result["agrees"] = abs(difference) <= noise
    if result["agrees"]:
        result["message"] = (f"measured {measured:.3f}× agrees with the Amdahl estimate "
                             f"{estimate:.3f}× within the noise (±{noise:.1%})")
    else:
        result["message"] = (
            f"measured {measured:.3f}× differs from the Amdahl estimate {estimate:.3f}× by "
            f"{difference:+.1%}, more than the noise (±{noise:.1%}): the kernels were timed "
            "alone on cold-L2 inputs at the profiled shapes; in the model, routing overhead, "
            "launch gaps, cache reuse and other shapes change that")
    return result


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters: how verify names a failure."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def verify_run(run: FinishedRun, options: VerifyOptions, log: VerifyLog | None = None
               ) -> dict[str, Any]:
    """Patch, check and time the run's model; return (and save) the verify.json content.

    Never ends in a traceback. Raises loader.RunError, one line, for what stops the check before
    the kernels run (no finished target, a model or kernel that does not load, a model whose own
    forward fails) and for an unforeseen failure of verify itself; a failure of the patched
    model (its forward or backward raising) is a FAIL result with the reason.
    """
    from autokernel.integrate.loader import RunError

    try:
        return _verify(run, options, log or VerifyLog())
    except RunError:
        raise
    except Exception as exc:  # verify's own failure: one line, not a traceback
        raise RunError(f"verify failed: {one_line(exc)}") from None


def _fresh_model(run: FinishedRun, device: str, like: nn.Module, log: VerifyLog,
                 role: str) -> nn.Module:
    """Another build of the run's model (a fresh import of its file: a deep copy would share a
    lambda's or closure's layers with the original) with the original's weights."""
    from autokernel.integrate.loader import load_run_model

    model = load_run_model(run, device, check_forward=False).model
    try:
        model.load_state_dict(like.state_dict())
    except Exception as exc:  # the seed gave it the same weights unless the model is unusual
        log.note(f"the {role} model keeps its own initial weights ({one_line(exc)})")
    return model


def _verify(run: FinishedRun, options: VerifyOptions, log: VerifyLog) -> dict[str, Any]:
    import torch

    from autokernel.integrate.loader import RunError, load_finished, load_run_model
    from autokernel.ops.spec import dtype_name
    from autokernel.profiling.model_loader import call_forward

    started = time.perf_counter()
    device = options.device
    loaded_kernels = load_finished(run, device)  # RunError: no finished target
    slower = [t.tag for t in run.finished_targets() if not run.beats_pytorch(t)]
    if slower:
        log.note(f"left out, slower than eager PyTorch at their profiled shape: "
                 f"{', '.join(slower)} (--all-kernels splices them in too)")
    loaded = load_run_model(run, device)  # RunError: the model no longer loads
    model, inputs, dtype = loaded.model, loaded.inputs, loaded.dtype
    dtype_label = dtype_name(dtype)
    log.emit(f"model {run.model_file.name} ({run.class_name}), {dtype_label} on {device}; "
             f"{len(loaded_kernels.kernels)} finished kernel(s)")

    patched = _fresh_model(run, device, model, log, "patched")
    try:
        patch = loaded_kernels.patch(patched, under_compile=PATCH_UNDER_COMPILE)
    except Exception as exc:
        raise RunError(f"splicing the kernels into the model failed: {one_line(exc)}") from None
    with torch.no_grad():
        try:
            original_out = call_forward(model, inputs)
        except Exception as exc:
            raise RunError(f"the run's model fails on its own inputs: {one_line(exc)}") from None
        patch.report.reset_counts()
        try:
            patched_out = call_forward(patched, inputs)
        except Exception as exc:
            failure = f"the patched model's forward raised {one_line(exc)}"
            return _failed(run, options, loaded_kernels.manifest, patch, dtype_label, failure,
                           log, started)
    calls = {tag: stats.calls for tag, stats in patch.report.kernels.items()}
    for line in patch.report.lines():
        log.emit(f"  {line}")
    for tag, stats in patch.report.kernels.items():
        if stats.calls == 0:
            why = ("; ".join(f"{r} ×{n}" for r, n in stats.fallbacks.items())
                   or "; ".join(f"{p or '<model>'}: {r}" for p, r in stats.skipped.items())
                   or "no module or call of the model matches what the kernel implements")
            log.note(f"{tag} is not used by the model's forward ({why}); its share is left "
                     "out of the Amdahl estimate")

    oracle_type = oracle_dtype(dtype)
    oracle_inputs = cast_inputs(inputs, oracle_type)
    oracle_model: nn.Module | None = None
    oracle_name = dtype_name(oracle_type)
    try:
        oracle_model = _fresh_model(run, device, model, log, "oracle").to(oracle_type)
        with torch.no_grad(), full_precision():
            oracle_out = call_forward(oracle_model, oracle_inputs)
    except Exception as exc:  # e.g. a model that hard-codes its dtype somewhere
        log.note(f"the {oracle_name} oracle failed ({one_line(exc)}); the patched model is "
                 "judged against the original instead")
        oracle_model, oracle_out, oracle_name = None, original_out, "original model"
    accuracy = agreement(output_tensors(original_out), output_tensors(patched_out),
                         output_tensors(oracle_out), ERROR_FLOOR.get(dtype_label, 1e-6),
                         oracle_name)

    gradients: dict[str, Any] = {"checked": False}
    if options.gradients:
        gradients = _gradient_check(model, patched, oracle_model, inputs, oracle_inputs,
                                    original_out, dtype_label, log)
    del oracle_model, oracle_out

    timing = _time_models(model, patched, inputs, options, log)
    patch.report.reset_counts()
    rows = _kernel_rows(run, loaded_kernels.manifest, patch.report, calls)
    contestants = timing["contestants"]
    speedup: dict[str, Any] = {}
    eager, patched_eager = contestants.get("eager"), contestants.get("patched")
    if eager and patched_eager:
        speedup["vs_eager"] = eager["median_us"] / patched_eager["median_us"]
        speedup["noise"] = math.hypot(eager["iqr_us"] / eager["median_us"],
                                      patched_eager["iqr_us"] / patched_eager["median_us"])
    if contestants.get("compile") and patched_eager:
        speedup["vs_compile"] = contestants["compile"]["median_us"] / patched_eager["median_us"]
        speedup["compile_vs_eager"] = eager["median_us"] / contestants["compile"]["median_us"]
    if contestants.get("compile") and contestants.get("patched_compile"):
        speedup["patched_compile_vs_compile"] = (contestants["compile"]["median_us"]
                                                 / contestants["patched_compile"]["median_us"])
    parts = [{"tag": r["tag"], "share": r["share"], "kernel_speedup": r["speedup_vs_eager"]}
             for r in rows if r["calls_per_forward"] > 0]
    amdahl = amdahl_check(parts, speedup.get("vs_eager"), speedup.get("noise"),
                          timing["meaningful"])
    if run.plan.device != device:
        amdahl["message"] += (f" (the plan's shares were profiled on {run.plan.device}, this "
                              f"check ran on {device})")

    passed = accuracy.passed and gradients.get("passed", True) is not False
    result = _result(run, options, dtype_label, rows, sum(calls.values()), accuracy.to_dict(),
                     gradients, timing, passed, log)
    result.update(speedup=speedup, amdahl=amdahl, host=host_cost(run, rows))
    patch.unpatch()
    result["seconds"] = round(time.perf_counter() - started, 1)
    save_result(run.root, result)
    return result


def _result(run: FinishedRun, options: VerifyOptions, dtype_label: str,
            rows: list[dict[str, Any]], routed_calls: int, accuracy: dict[str, Any],
            gradients: dict[str, Any], timing: dict[str, Any], passed: bool, log: VerifyLog,
            failure: str | None = None) -> dict[str, Any]:
    import torch

    device = options.device
    return {
        "run": run.state.run_tag,
        "directory": str(run.root),
        "model": str(run.model_file.relative_to(run.root)),
        "class_name": run.class_name,
        "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "dtype": dtype_label,
        "versions": software_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": None,
        "kernels": rows,
        "routed_calls_per_forward": routed_calls,
        "accuracy": accuracy,
        "gradients": gradients,
        "timing": timing,
        "speedup": {},
        "amdahl": {},
        "passed": passed,
        "failure": failure,
        "notes": log.notes,
    }


def _failed(run: FinishedRun, options: VerifyOptions, manifest: list[dict[str, Any]],
            patch: Any, dtype_label: str, failure: str, log: VerifyLog,
            started: float) -> dict[str, Any]:
    """The result of a check that could not compare outputs: FAIL, with the reason."""
    log.emit(f"FAIL: {failure}")
    rows = _kernel_rows(run, manifest, patch.report, {})
    accuracy = {"error_original": math.nan, "error_patched": math.inf, "bound": math.nan,
                "difference": math.inf, "max_abs_difference": math.inf, "oracle": "none",
                "rule": failure, "passed": False}
    timing = {"rounds": 0, "meaningful": options.device == "cuda", "contestants": {},
              "errors": {}, "compile_seconds": {}, "compile_backend": None, "protocol": ""}
    result = _result(run, options, dtype_label, rows, 0, accuracy, {"checked": False}, timing,
                     False, log, failure)
    patch.unpatch()
    result["seconds"] = round(time.perf_counter() - started, 1)
    save_result(run.root, result)
    return result


def _gradient_check(model: nn.Module, patched: nn.Module, oracle_model: nn.Module | None,
                    inputs: Any, oracle_inputs: Any, original_out: Any, dtype_label: str,
                    log: VerifyLog) -> dict[str, Any]:
    """Parameter gradients of the patched model against the oracle's, next to the original's.
    A backward that raises in the patched model only is a FAIL; one that raises in the original
    too (a model with no backward) means nothing can be checked."""
    import torch

    tensors = output_tensors(original_out)
    if not tensors or not any(p.requires_grad for p in model.parameters()):
        log.note("gradients not checked: the model has no floating output or no trainable "
                 "parameter")
        return {"checked": False}
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device)
               for t in tensors]
    try:
        original = parameter_gradients(model, inputs, weights)
    except Exception as exc:
        log.note(f"gradients not checked: the original model's backward raised {one_line(exc)}")
        return {"checked": False, "reason": one_line(exc)}
    try:
        routed = parameter_gradients(patched, inputs, weights)
    except Exception as exc:
        failure = f"the patched model's backward raised {one_line(exc)}"
        log.note(failure)
        return {"checked": True, "passed": False, "parameters": len(original),
                "error_original": 0.0, "error_patched": math.inf, "bound": math.nan,
                "failure": failure}
    exact, name = original, "original gradients"
    if oracle_model is not None:
        try:
            with full_precision():
                exact = parameter_gradients(oracle_model, oracle_inputs, weights)
            name = "oracle gradients"
        except Exception as exc:
            log.note(f"the oracle's backward raised {one_line(exc)}; gradients are judged "
                     "against the original model's")
    check = agreement(original, routed, exact, GRADIENT_FLOOR.get(dtype_label, 1e-5), name)
    return {"checked": True, "parameters": len(exact), **check.to_dict()}


def _time_models(model: nn.Module, patched: nn.Module, inputs: Any, options: VerifyOptions,
                 log: VerifyLog) -> dict[str, Any]:
    import torch

    from autokernel.profiling.model_loader import call_forward

    device = torch.device(options.device)
    functions: dict[str, Callable[[], Any]] = {
        "eager": lambda: call_forward(model, inputs),
        "patched": lambda: call_forward(patched, inputs),
    }
    compile_seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    if options.compile:
        for name, target in (("compile", model), ("patched_compile", patched)):
            compiled = torch.compile(target, backend=options.compile_backend)
            functions[name] = (lambda c=compiled: call_forward(c, inputs))
    ready: dict[str, Callable[[], Any]] = {}
    with torch.no_grad():
        for name, fn in functions.items():
            begin = time.perf_counter()
            try:
                for _ in range(WARMUP_CALLS if device.type == "cuda" else 1):
                    fn()
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except Exception as exc:  # a compiler failure is a finding, not a crash of verify
                errors[name] = one_line(exc)
                log.note(f"{name} failed and is left out of the timing: {errors[name]}")
                continue
            if "compile" in name:
                compile_seconds[name] = round(time.perf_counter() - begin, 2)
            ready[name] = fn
        log.emit(f"timing {', '.join(ready)} (interleaved rounds, harness protocol)")
        try:
            timings, rounds = time_contestants(ready, device, options.iters, options.budget_s)
        except Exception as exc:  # a contestant that ran once and then failed
            errors["timing"] = one_line(exc)
            log.note(f"timing failed: {errors['timing']}")
            timings, rounds = {}, 0
    meaningful = device.type == "cuda"  # a CPU caveat is printed once, by end_to_end_lines
    return {
        "rounds": rounds,
        "meaningful": meaningful,
        "protocol": "autokernel.harness.timing.time_synchronous_calls: wall time of one "
                    "synchronized forward (host launch included), rotating order, L2 flush; "
                    "median and IQR",
        "contestants": {name: t.to_dict() for name, t in timings.items()},
        "compile_backend": options.compile_backend if options.compile else None,
        "compile_seconds": compile_seconds,
        "under_compile": PATCH_UNDER_COMPILE if options.compile else None,
        "errors": errors,
    }


def save_result(root: Path, result: dict[str, Any]) -> Path:
    path = root / VERIFY_FILE
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def read_result(root: Path) -> dict[str, Any] | None:
    path = root / VERIFY_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Presentation


def _us(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.3f} ms" if value >= 1000 else f"{value:.1f} µs"


def end_to_end_lines(result: dict[str, Any]) -> list[str]:
    """The end-to-end figures in a few lines (verify's output, and the report's section)."""
    lines = []
    speedup, amdahl = result.get("speedup", {}), result.get("amdahl", {})
    timing = result.get("timing", {})
    contestants = timing.get("contestants", {})
    labels = {"eager": "eager", "compile": "torch.compile", "patched": "patched eager",
              "patched_compile": "patched torch.compile"}
    for name, label in labels.items():
        t = contestants.get(name)
        if t:
            lines.append(f"{label:<22} {_us(t['median_us']):>12}  (IQR {_us(t['iqr_us'])}, "
                         f"{t['samples']} rounds)")
    for name, error in timing.get("errors", {}).items():
        lines.append(f"{labels.get(name, name):<22} failed: {error}")
    parts = []
    if speedup.get("vs_eager") is not None:
        parts.append(f"{speedup['vs_eager']:.3f}× vs eager")
    if speedup.get("vs_compile") is not None:
        parts.append(f"{speedup['vs_compile']:.3f}× vs torch.compile")
    if speedup.get("patched_compile_vs_compile") is not None:
        parts.append(f"patched+compile {speedup['patched_compile_vs_compile']:.3f}× vs "
                     "torch.compile")
    if parts:
        noise = speedup.get("noise")
        lines.append("end-to-end speedup: " + ", ".join(parts)
                     + (f" (noise ±{noise * 100:.1f}%)" if noise is not None else ""))
    if timing.get("under_compile") == "inductor" and contestants.get("patched_compile"):
        lines.append("patched torch.compile: the kernels step aside while torch.compile traces "
                     "(Inductor compiles the original ops); patch(model, under_compile="
                     "\"kernels\") puts them in the graph as custom ops")
    if amdahl.get("estimate_vs_eager") is not None:
        lines.append(f"Amdahl estimate (plan shares × kernel speedups vs eager): "
                     f"{amdahl['estimate_vs_eager']:.3f}× vs eager")
    if amdahl.get("message"):
        lines.append(("DISAGREE: " if amdahl.get("agrees") is False else "") + amdahl["message"])
    host_line = host_cost_line(result.get("host", {}))
    if host_line and timing.get("meaningful", True):
        lines.append(host_line)
    if not timing.get("meaningful", True):
        lines.append(CPU_TIMING_NOTE)
    return lines


def routed_where(row: dict[str, Any]) -> str:
    """Where a kernel was spliced in: modules, the model's own functions, call scopes."""
    parts = []
    if row.get("modules"):
        count = len(row["modules"])
        parts.append(f"{count} module{'' if count == 1 else 's'}")
    parts += row.get("functions", [])
    if row.get("scopes"):
        parts.append(", ".join(p or "<model>" for p in row["scopes"]))
    return "; ".join(parts) or "–"


def print_result(result: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"verify {result['run']}: {result['dtype']} on "
                        f"{result['gpu'] or result['device']}", title_justify="left")
    for column in ("kernel", "routed", "calls/fwd", "left to PyTorch", "kernel speedup",
                   "share", "backward"):
        table.add_column(column)
    for row in result["kernels"]:
        fallbacks = "; ".join(f"{r} ×{n}" for r, n in row["fallbacks"].items()) or "–"
        skipped = "; ".join(f"{p or '<model>'}: {why}" for p, why in row["skipped"].items())
        if skipped:
            fallbacks = f"{fallbacks} (skipped {skipped})" if fallbacks != "–" else \
                f"skipped {skipped}"
        speed = (f"{row['speedup_vs_eager']:.3g}× eager" if row["speedup_vs_eager"] else "–")
        table.add_row(row["tag"], routed_where(row), str(row["calls_per_forward"]), fallbacks,
                      speed, f"{row['share'] * 100:.1f}%", row["backward"])
    console.print(table)
    if result.get("failure"):
        console.print(f"[bold red]FAIL[/]: {result['failure']}", highlight=False)
        console.print(f"saved {Path(result['directory']) / VERIFY_FILE}", highlight=False)
        return
    accuracy = result["accuracy"]
    verdict = "[green]PASS[/]" if accuracy["passed"] else "[bold red]FAIL[/]"
    console.print(f"output vs {accuracy['oracle']} oracle: relative error original "
                  f"{accuracy['error_original']:.2e}, patched {accuracy['error_patched']:.2e} "
                  f"(bound {accuracy['bound']:.2e} = {ERROR_GROWTH:g}× original + floor); "
                  f"patched vs original {accuracy['difference']:.2e}, max |Δ| "
                  f"{accuracy['max_abs_difference']:.2e}: {verdict}")
    gradients = result["gradients"]
    if gradients.get("failure"):
        console.print(f"gradients: [bold red]FAIL[/]: {gradients['failure']}", highlight=False)
    elif gradients.get("checked"):
        verdict = "[green]PASS[/]" if gradients["passed"] else "[bold red]FAIL[/]"
        console.print(f"gradients of {gradients['parameters']} parameters: relative error "
                      f"original {gradients['error_original']:.2e}, patched "
                      f"{gradients['error_patched']:.2e} (bound {gradients['bound']:.2e}): "
                      f"{verdict}")
    for line in end_to_end_lines(result):
        console.print(line, highlight=False)
    console.print(f"saved {Path(result['directory']) / VERIFY_FILE}", highlight=False)
