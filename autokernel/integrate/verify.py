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
3. Latency: eager, torch.compile, patched eager and patched torch.compile, each timed twice
   (`end_to_end.py`): device time per forward (CUDA-graph replays timed by the harness's
   device-time protocol; plain forwards queued ahead where a forward cannot be captured) and
   wall time per synchronized forward (host launch included). Two figures, reported side by
   side and never mixed: the device-time speedup is the one compared with the Amdahl estimate
   from the plan's shares and the kernels' device-time speedups (a disagreement larger than the
   combined relative IQR is called out); the wall time says what an eager caller waiting for
   each forward pays, which in a host-bound forward is mostly launch cost. Timing runs before
   the oracle and the gradient check, and the eager pair's wall time before anything is
   compiled: on an H200 each of those slowed the eager forwards after it, by up to 2x for
   the patched model's Python routing (docs/benchmarks/route-cost-h200/).

Everything lands in `verify.json` in the workspace (which `autokernel report` reads). Verify never
ends in a traceback: a patched model whose forward raises is a FAIL with the reason; what stops
the check before the kernels run is a one-line error (`loader.RunError`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autokernel.integrate.compiled_path import settle
from autokernel.integrate.accuracy import (  # noqa: F401 - verify's API, re-exported
    ERROR_FLOOR,
    ERROR_GROWTH,
    GRADIENT_FLOOR,
    Agreement,
    agreement,
    cast_inputs,
    full_precision,
    oracle_dtype,
    output_tensors,
    parameter_gradients,
    projection_loss,
    relative_error,
)
from autokernel.integrate.end_to_end import (  # noqa: F401 - verify's API, re-exported
    CPU_TIMING_NOTE,
    DEVICE,
    SCHEMA,
    WALL,
    Timing,
    amdahl_check,
    combined_amdahl,
    end_to_end_lines,
    host_cost,
    host_cost_line,
    speedup_figure,
    speedups,
    time_device,
    time_wall,
)
from autokernel.integrate.verify_result import (  # noqa: F401 - verify's API, re-exported
    VERIFY_FILE,
    print_result,
    read_result,
    routed_where,
    save_result,
)
from autokernel.text import count_of, error_summary, scope_name
from autokernel.versions import software_versions

# How verify patches its model: under torch.compile the compile-transparent kernels (triton_ops)
# go into the graph and the opaque ones (custom_ops) step aside for Inductor; then
# `compiled_path.settle` leaves out kernels until patched+compile is not slower than compile.
PATCH_UNDER_COMPILE = "transparent"

if TYPE_CHECKING:
    from torch import nn

    from autokernel.integrate.loader import FinishedRun
    from autokernel.integrate.patch import PatchReport

WARMUP_CALLS = 3  # on a GPU; one on the CPU, where timings mean nothing anyway
DEFAULT_BUDGET_S = 20.0


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


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters: how verify names a failure."""
    return error_summary(exc, limit=300)


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
             f"{count_of(len(loaded_kernels.kernels), 'finished kernel')}")

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
                   or "; ".join(f"{scope_name(p)}: {r}" for p, r in stats.skipped.items())
                   or "no module or call of the model matches what the kernel implements")
            log.note(f"{tag} is not used by the model's forward ({why}); its share is left "
                     "out of the Amdahl estimate")

    # Timed before the oracle and the gradient check: on an H200, after the fp32 oracle's
    # forward the same eager forwards took +280 µs (eager) and +770 µs (patched) of wall time
    # in this process (docs/benchmarks/route-cost-h200/).
    timing = _time_models(model, patched, inputs, options, log)

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

    patch.report.reset_counts()
    rows = _kernel_rows(run, loaded_kernels.manifest, patch.report, calls)
    speedup = {which: speedups(timing[which]["contestants"]) for which in (DEVICE, WALL)}
    compiled_path: dict[str, Any] = {}
    if options.compile:
        compiled_path, patch = _settle_compiled_path(loaded_kernels, patch, model, patched,
                                                     inputs, options, rows, speedup, timing)
    parts = [{"tag": r["tag"], "share": r["share"], "kernel_speedup": r["speedup_vs_eager"]}
             for r in rows if r["calls_per_forward"] > 0]
    measured = speedup[DEVICE]
    amdahl = amdahl_check(parts, measured.get("vs_eager"), measured.get("noise"),
                          timing["meaningful"])
    if run.plan.device != device:
        amdahl["message"] += (f" (the plan's shares were profiled on {run.plan.device}, this "
                              f"check ran on {device})")

    passed = accuracy.passed and gradients.get("passed", True) is not False
    result = _result(run, options, dtype_label, rows, sum(calls.values()), accuracy.to_dict(),
                     gradients, timing, passed, log)
    result.update(speedup=speedup, amdahl=amdahl, host=host_cost(run, rows),
                  compiled_path=compiled_path)
    patch.unpatch()
    result["seconds"] = round(time.perf_counter() - started, 1)
    save_result(run.root, result)
    return result


def _settle_compiled_path(loaded_kernels: Any, patch: Any, model: nn.Module, patched: nn.Module,
                          inputs: Any, options: VerifyOptions, rows: list[dict[str, Any]],
                          speedup: dict[str, Any], timing: dict[str, Any]
                          ) -> tuple[dict[str, Any], Any]:
    """`compiled_path.settle` on this model: returns its record and the patch now in place."""
    import torch

    from autokernel.profiling.model_loader import call_forward

    stats = patch.report.kernels
    in_graph = [tag for tag, s in stats.items() if s.in_compiled_graphs and s.calls]
    opaque = {tag: s.compile_path for tag, s in stats.items() if not s.in_compiled_graphs}
    current = {"patch": patch}

    def retime(left_out: list[str]) -> float | None:
        current["patch"].unpatch()
        current["patch"] = loaded_kernels.patch(patched, PATCH_UNDER_COMPILE, tuple(left_out))
        torch._dynamo.reset()  # both contestants compile afresh, alike
        device = torch.device(options.device)
        contestants = {name: (lambda c=torch.compile(target, backend=options.compile_backend):
                              call_forward(c, inputs))
                       for name, target in (("compile", model), ("patched_compile", patched))}
        with torch.no_grad():
            for fn in contestants.values():
                for _ in range(WARMUP_CALLS):
                    fn()
            torch.cuda.synchronize()
            timed = time_device(contestants, device, options.iters, options.budget_s / 2)
        return speedups(timed["contestants"]).get("patched_compile_vs_compile")

    record = settle(speedup[DEVICE].get("patched_compile_vs_compile"), in_graph, opaque,
                    {r["tag"]: r["speedup_vs_compile"] for r in rows},
                    bool(timing["meaningful"]), retime)
    return record, current["patch"]


def _result(run: FinishedRun, options: VerifyOptions, dtype_label: str,
            rows: list[dict[str, Any]], routed_calls: int, accuracy: dict[str, Any],
            gradients: dict[str, Any], timing: dict[str, Any], passed: bool, log: VerifyLog,
            failure: str | None = None) -> dict[str, Any]:
    import torch

    device = options.device
    return {
        "schema": SCHEMA,
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
    timing = {"meaningful": options.device == "cuda", DEVICE: {"contestants": {}},
              WALL: {"contestants": {}}, "errors": {}, "compile_seconds": {},
              "compile_backend": None}
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
    """Device time and wall time per forward of each contestant, in three passes with a third
    of the time budget each: the eager contestants' wall time first, before anything is
    compiled, then every contestant's device time, then the compiled ones' wall time.

    Why the eager wall time comes first, before torch.compile is even called: on an H200, with
    torch.compile objects made and not yet run (or run after a while), eager forwards of
    examples/models/prenorm_decoder took up to +350 µs and the patched ones, whose routing is
    Python, up to +1060 µs of wall time (docs/benchmarks/route-cost-h200.md). An eager user's
    process compiles nothing."""
    import torch

    from autokernel.profiling.model_loader import call_forward

    device = torch.device(options.device)
    eager_functions: dict[str, Callable[[], Any]] = {
        "eager": lambda: call_forward(model, inputs),
        "patched": lambda: call_forward(patched, inputs),
    }
    compiled_functions: dict[str, Callable[[], Any]] = {}
    compile_seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    ready: dict[str, Callable[[], Any]] = {}
    empty: dict[str, Any] = {"contestants": {}}
    figures: dict[str, dict[str, Any]] = {DEVICE: dict(empty), WALL: dict(empty)}
    budget_s = options.budget_s / 3

    def warm(functions: dict[str, Callable[[], Any]]) -> None:
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

    def timed(which: str, measure: Callable[..., dict[str, Any]],
              contestants: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        try:
            return measure(contestants, device, options.iters, budget_s)
        except Exception as exc:  # a contestant that ran once and then failed
            errors[f"{which} timing"] = one_line(exc)
            log.note(f"{which} timing failed: {errors[f'{which} timing']}")
            return {"contestants": {}}

    with torch.no_grad():
        warm(eager_functions)
        log.emit(f"timing {', '.join(ready)}: wall time per synchronized forward (interleaved "
                 "rounds, harness protocol), before anything is compiled in this process")
        figures[WALL] = timed(WALL, time_wall, dict(ready))
        if options.compile:  # made only now: an uncalled torch.compile object slows eager too
            for name, target in (("compile", model), ("patched_compile", patched)):
                compiled = torch.compile(target, backend=options.compile_backend)
                compiled_functions[name] = (lambda c=compiled: call_forward(c, inputs))
        warm(compiled_functions)
        log.emit(f"timing {', '.join(ready)}: device time per forward"
                 + (", then the compiled ones' wall time" if compiled_functions else ""))
        figures[DEVICE] = timed(DEVICE, time_device, ready)
        compiled_ready = {name: fn for name, fn in ready.items() if name in compiled_functions}
        if compiled_ready:
            compiled_wall = timed(WALL, time_wall, compiled_ready)
            figures[WALL].setdefault("contestants", {}).update(
                compiled_wall.get("contestants", {}))
            figures[WALL]["compiled_rounds"] = compiled_wall.get("rounds")
    meaningful = device.type == "cuda"  # a CPU caveat is printed once, by end_to_end_lines
    return {
        "meaningful": meaningful,
        DEVICE: figures[DEVICE],
        WALL: figures[WALL],
        "compile_backend": options.compile_backend if options.compile else None,
        "compile_seconds": compile_seconds,
        "under_compile": PATCH_UNDER_COMPILE if options.compile else None,
        "errors": errors,
    }
