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
3. In-context selection and the deliveries (`in_context.py`, `ablation.py`, `delivery.py`): in
   eager mode, then under torch.compile, the model is timed with each kernel in and out
   (device time per forward from CUDA-graph replays, wall time per synchronized forward, in
   paired rounds), and only the kernels whose removal measurably slows the model stay in. Then
   the deliveries (patched eager, a CUDA graph, torch.compile and reduce-overhead, each with
   its mode's kernels) are timed, and the fastest in wall time is the delivered model that
   `autokernel.load(DIR).optimize(model)` and the export's `optimize` give. The classic
   figures (eager, torch.compile, patched eager and patched torch.compile: "patched" with the
   selected kernels) come from the same batches. The device-time speedup is the one compared
   with the Amdahl estimate from the plan's shares and the kernels' device-time speedups (a
   disagreement larger than the combined relative IQR is called out); the wall time says what
   a caller waiting for each forward pays, which in a host-bound forward is mostly launch
   cost. Timing runs before the oracle and the gradient check, and the eager configurations
   before anything is compiled: on an H200 each of those slowed the eager forwards after it,
   by up to 2x for the patched model's Python routing (docs/benchmarks/route-cost-h200/).
   The accuracy and gradient checks run with every kernel routed (the strictest case); the
   chosen delivery's own output is checked against the oracle too.

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
    WALL_PROTOCOL,
    Timing,
    amdahl_check,
    combined_amdahl,
    end_to_end_lines,
    host_cost,
    host_cost_line,
    speedup_figure,
    speedups,
    time_device,
    time_host,
    time_wall,
)
from autokernel.integrate.ablation import FORCED, NOT_JUDGED_CPU
from autokernel.integrate.in_context import Setup, measure_in_context
from autokernel.integrate.verify_result import (  # noqa: F401 - verify's API, re-exported
    VERIFY_FILE,
    print_result,
    read_result,
    routed_where,
    save_result,
)
from autokernel.text import count_of, error_summary, scope_name
from autokernel.versions import software_versions

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autokernel.integrate.loader import FinishedRun
    from autokernel.integrate.patch import PatchReport
    from autokernel.integrate.call_recording import CallRecorder

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


def _sharing_copy(run: FinishedRun, device: str, like: nn.Module) -> nn.Module:
    """Another build of the run's model whose parameters and buffers are `like`'s own tensors
    (no second copy of the weights): one per configuration that in-context selection times."""
    from autokernel.integrate.loader import load_run_model

    model = load_run_model(run, device, check_forward=False).model
    model.load_state_dict(like.state_dict(), assign=True)
    return model


def selection_is_judged(run: FinishedRun, device: str) -> bool:
    """Does in-context selection leave out the kernels that do not make the model faster? Not
    on the CPU (the interpreter's timings say nothing) and not with --all-kernels."""
    return device == "cuda" and not run.include_slower


def _verify(run: FinishedRun, options: VerifyOptions, log: VerifyLog) -> dict[str, Any]:
    import torch

    from autokernel.integrate.loader import RunError, load_finished, load_run_model
    from autokernel.integrate.call_recording import recording_calls
    from autokernel.ops.spec import dtype_name
    from autokernel.profiling.model_loader import call_forward

    started = time.perf_counter()
    device = options.device
    loaded_kernels = load_finished(run, device, candidates=True)  # RunError: none finished
    judged = selection_is_judged(run, device)
    if run.include_slower:
        log.note("--all-kernels: every finished kernel is routed, whatever it does to the model")
    loaded = load_run_model(run, device)  # RunError: the model no longer loads
    model, inputs, dtype = loaded.model, loaded.inputs, loaded.dtype
    dtype_label = dtype_name(dtype)
    log.emit(f"model {run.model_file.name} ({run.class_name}), {dtype_label} on {device}; "
             f"{count_of(len(loaded_kernels.kernels), 'finished kernel')}")

    patched = _fresh_model(run, device, model, log, "patched")
    try:
        patch = loaded_kernels.patch(patched, under_compile="kernels")
    except Exception as exc:
        raise RunError(f"splicing the kernels into the model failed: {one_line(exc)}") from None
    with torch.no_grad():
        try:
            original_out = call_forward(model, inputs)
        except Exception as exc:
            raise RunError(f"the run's model fails on its own inputs: {one_line(exc)}") from None
        patch.report.reset_counts()
        try:
            with recording_calls() as recorded:  # each kernel's first routed call, to time again
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
    setup = Setup(kernels=loaded_kernels, model=model, inputs=inputs,
                  device=torch.device(device),
                  copy_model=lambda: _sharing_copy(run, device, model), rounds=options.iters,
                  budget_s=options.budget_s, compile=options.compile,
                  compile_backend=options.compile_backend, judged=judged,
                  forced_reason=FORCED if run.include_slower else NOT_JUDGED_CPU,
                  emit=log.emit, note=log.note)
    measured = measure_in_context(setup)
    timing = _timing(measured, options)
    routing_cost = routing_host_cost(recorded, torch.device(device))
    for line in routing_cost_lines(routing_cost):
        log.emit(line)

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
    floor = ERROR_FLOOR.get(dtype_label, 1e-6)
    accuracy = agreement(output_tensors(original_out), output_tensors(patched_out),
                         output_tensors(oracle_out), floor, oracle_name)
    delivery = measured["delivery"]
    if delivery is not None:
        delivery["accuracy"] = _delivery_accuracy(run, device, model, loaded_kernels, delivery,
                                                  inputs, original_out, oracle_out, floor,
                                                  oracle_name, options, log)

    gradients: dict[str, Any] = {"checked": False}
    if options.gradients:
        gradients = _gradient_check(model, patched, oracle_model, inputs, oracle_inputs,
                                    original_out, dtype_label, log)
    del oracle_model, oracle_out

    patch.report.reset_counts()
    rows = _kernel_rows(run, loaded_kernels.manifest, patch.report, calls)
    eager_rows = {r["kernel"]: r for r in measured["ablation"] if r["mode"] == "eager"}
    for row in rows:
        row["selected"] = {mode: row["tag"] in tags
                           for mode, tags in measured["selection"].items()}
        row["host_us_per_call"] = _host_per_call(eager_rows.get(row["tag"]),
                                                 row["calls_per_forward"])
        row["routing_host_us"] = routing_cost.get(row["tag"])
    speedup = {which: speedups(timing[which]["contestants"]) for which in (DEVICE, WALL)}
    eager_choice = set(measured["selection"].get("eager", []))
    parts = [{"tag": r["tag"], "share": r["share"], "kernel_speedup": r["speedup_vs_eager"]}
             for r in rows if r["calls_per_forward"] > 0 and r["tag"] in eager_choice]
    amdahl = amdahl_check(parts, speedup[DEVICE].get("vs_eager"), speedup[DEVICE].get("noise"),
                          timing["meaningful"])
    if run.plan.device != device:
        amdahl["message"] += (f" (the plan's shares were profiled on {run.plan.device}, this "
                              f"check ran on {device})")

    passed = (accuracy.passed and gradients.get("passed", True) is not False
              and (delivery is None or delivery["accuracy"].get("passed", True) is not False))
    result = _result(run, options, dtype_label, rows, sum(calls.values()), accuracy.to_dict(),
                     gradients, timing, passed, log)
    result.update(speedup=speedup, amdahl=amdahl, host=host_cost(run, rows),
                  ablation=measured["ablation"], ablations=measured["ablations"],
                  selection=measured["selection"], deliveries=measured["deliveries"],
                  delivery=delivery)
    patch.unpatch()
    result["seconds"] = round(time.perf_counter() - started, 1)
    save_result(run.root, result)
    return result


ROUTING_HOST_LIMIT_US = 10.0  # issue 25: a routed call adds at most this over the bare launch


def routing_host_cost(recorded: CallRecorder, device: torch.device
                      ) -> dict[str, dict[str, float]]:
    """What the routing adds to a kernel's host time per call, per kernel tag (a GPU only):
    its first routed call of the patched forward made again through its route ("routed"), and
    the kernel file's kernel_fn alone on the same arguments ("bare"), each timed on the host
    clock with the GPU held busy (`time_host`), grad off as in that forward. A kernel whose
    route spans several calls (a deferred add and its norm, an attention or LM-head chain)
    has no replay and no figure."""
    import torch

    if device.type != "cuda":
        return {}
    figures: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for tag, routed in recorded.routed.items():
            try:
                timed = time_host({"routed": routed, "bare": recorded.bare[tag]}, device)
            except Exception:  # a replay that fails is no figure, not a failed verify
                continue
            us = {name: t["median_us"] for name, t in timed["contestants"].items()}
            if "routed" in us and "bare" in us:
                figures[tag] = {"routed_us": us["routed"], "bare_us": us["bare"],
                                "routing_us": us["routed"] - us["bare"]}
    return figures


def routing_cost_lines(figures: dict[str, dict[str, float]]) -> list[str]:
    if not figures:
        return []
    parts = [f"{tag} {f['routing_us']:+.1f} µs ({f['routed_us']:.1f} routed, "
             f"{f['bare_us']:.1f} bare)" for tag, f in figures.items()]
    over = [tag for tag, f in figures.items() if f["routing_us"] > ROUTING_HOST_LIMIT_US]
    verdict = (f"over {ROUTING_HOST_LIMIT_US:g} µs: {', '.join(over)}" if over
               else f"every one within {ROUTING_HOST_LIMIT_US:g} µs")
    return [f"host cost of the routing per call, over the bare kernel_fn launch (GPU held "
            f"busy): {'; '.join(parts)}; {verdict}"]


def _host_per_call(row: dict[str, Any] | None, calls: int) -> float | None:
    """The host time a kernel's routed calls add per call, over the PyTorch code they replace:
    the model's host time per forward with it minus without it (the ablation's row, GPU held
    busy), over its calls per forward."""
    if row is None or not calls:
        return None
    with_us, without_us = row["with_us"].get("host"), row["without_us"].get("host")
    if with_us is None or without_us is None:
        return None
    return (with_us - without_us) / calls


def _timing(measured: dict[str, Any], options: VerifyOptions) -> dict[str, Any]:
    """verify.json's `timing` section: the classic four contestants per figure, how they were
    timed, compile seconds and errors."""
    methods = measured["methods"].get("eager", {})
    meaningful = options.device == "cuda"
    device_meta = {k: methods.get(k) for k in ("method", "protocol") if methods.get(k)}
    return {
        "meaningful": meaningful,
        DEVICE: {**device_meta, "rounds": methods.get("device_rounds"),
                 "contestants": measured["classic"][DEVICE],
                 "notes": list(methods.get("notes") or [])},
        WALL: {"protocol": WALL_PROTOCOL, "rounds": methods.get("wall_rounds"),
               "contestants": measured["classic"][WALL],
               "compiled_rounds": measured["methods"].get("compile", {}).get("wall_rounds")},
        "compile_backend": options.compile_backend if options.compile else None,
        "compile_seconds": measured["compile_seconds"],
        "under_compile": "kernels" if options.compile else None,
        "errors": measured["errors"],
        "delivery_rounds": measured["delivery_rounds"],
    }


def _delivery_accuracy(run: FinishedRun, device: str, like: nn.Module, loaded_kernels: Any,
                       delivery: dict[str, Any], inputs: Any, original_out: Any,
                       oracle_out: Any, floor: float, oracle_name: str, options: VerifyOptions,
                       log: VerifyLog) -> dict[str, Any]:
    """The chosen delivery made the way `optimize(model)` makes it (`delivery.deliver`, on a
    fresh copy of the model), its output judged against the oracle by the same rule."""
    import torch

    from autokernel.integrate.delivery import Delivery, deliver
    from autokernel.profiling.model_loader import call_forward

    copy = _sharing_copy(run, device, like)
    choice = Delivery.from_dict(delivery)
    try:
        with torch.no_grad():
            made = deliver(copy, loaded_kernels.kernels, choice, options.compile_backend)
            out = call_forward(made.model, inputs)
        made.patch.unpatch()
    except Exception as exc:
        failure = f"the delivered model ({choice.label}) raised {one_line(exc)}"
        log.note(failure)
        return {"passed": False, "failure": failure}
    check = agreement(output_tensors(original_out), output_tensors(out),
                      output_tensors(oracle_out), floor, oracle_name)
    return check.to_dict()


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
