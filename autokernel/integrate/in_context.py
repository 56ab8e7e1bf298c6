"""verify's measurements on the whole model: the in-context ablation per mode, then the deliveries.

Order matters, and follows what was measured on an H200 (docs/benchmarks/route-cost-h200/):
eager forwards run slower in wall time once torch.compile objects exist in the process, so

1. the eager ablation runs first, before anything is compiled: each configuration (a set of
   kernels) is its own copy of the model, sharing the original's weights, patched with those
   kernels; every batch times all of its configurations in the same interleaved rounds, wall
   time per synchronized forward and device time per forward (CUDA-graph replays), with the
   harness's protocols (`end_to_end.time_wall`, `end_to_end.time_device`);
2. then the compile ablation, the same with each configuration under `torch.compile` (its
   kernels in the compiled graph);
3. then, on a GPU, the deliveries (`delivery.py`) in one paired batch of wall times: plain
   torch.compile and `mode="reduce-overhead"`, each without and with the compile selection,
   and the model in a CUDA graph without and with the eager selection. The eager pair's wall
   times come from step 1 (measured before any compile object existed, as an eager user's
   process would be). The delivery is the fastest in wall time; its device time is that of
   its kernels (the configuration's graph replays from step 1 or 2).

`measure_in_context` returns verify.json's `ablation`, `selection` and `deliveries` sections and
the four contestants of its `timing` section (eager, patched eager, torch.compile, patched
torch.compile), which keep their old meaning: "patched" is the model with the kernels that
in-context selection kept.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autokernel.integrate.ablation import (
    DEVICE,
    FIGURES,
    NOT_JUDGED_CPU,
    WALL,
    Ablation,
    Batch,
    Config,
    ConfigRounds,
    ablate,
    label,
)
from autokernel.integrate.delivery import (
    COMPILE,
    CUDA_GRAPH,
    EAGER,
    KERNEL_MODE,
    REDUCE_OVERHEAD,
    Delivery,
    GraphedForward,
    compile_with_kernels,
)
from autokernel.integrate.end_to_end import Timing, time_device, time_host, time_wall
from autokernel.text import error_summary

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autokernel.integrate.loader import LoadedKernels

HOST = "host"  # a third figure, measured on a GPU, not judged: host time per forward
WARMUP_CALLS = 3  # on a GPU; one on the CPU, where timings mean nothing anyway
RECOMPILE_LIMIT = 256  # every configuration is another instance of the model's classes


@dataclass
class Setup:
    """What the measurements need: the loaded kernels, the original model and its inputs, a way
    to build another copy of it (sharing its weights), and the verify options' figures."""

    kernels: LoadedKernels
    model: nn.Module
    inputs: Any
    device: torch.device
    copy_model: Callable[[], nn.Module]
    rounds: int | None  # None: as many as the budget allows
    budget_s: float  # per batch, both figures together
    compile: bool
    compile_backend: str
    judged: bool  # False on the CPU and with --all-kernels: every kernel is routed
    forced_reason: str = NOT_JUDGED_CPU
    emit: Callable[[str], None] = print
    note: Callable[[str], None] = print


@dataclass
class Models:
    """The configurations' models, made once each and kept until `close`."""

    setup: Setup
    eager: dict[Config, nn.Module] = field(default_factory=dict)
    compiled: dict[tuple[str, Config], Callable[..., Any]] = field(default_factory=dict)
    patches: list[Any] = field(default_factory=list)

    def copy(self, config: Config) -> nn.Module:
        """A new copy of the model with `config`'s kernels routed in (compile modes included)."""
        return self._patched_copy(config)[0]

    def _patched_copy(self, config: Config) -> tuple[nn.Module, Any]:
        model = self.setup.copy_model()
        patch = None
        if config:
            patch = self.setup.kernels.patch(model, under_compile="kernels", only=config)
            self.patches.append(patch)
        return model, patch

    def eager_model(self, config: Config) -> nn.Module:
        if not config:
            return self.setup.model
        if config not in self.eager:
            self.eager[config] = self.copy(config)
        return self.eager[config]

    def compiled_model(self, mode: str, config: Config) -> Callable[..., Any]:
        key = (mode, config)
        if key not in self.compiled:
            if mode == CUDA_GRAPH:
                self.compiled[key] = GraphedForward(self.eager_model(config))
            else:  # as `deliver` compiles: one helper, so the ablation measures what is delivered
                model, patch = self._patched_copy(config)
                self.compiled[key] = compile_with_kernels(model, patch, mode,
                                                          self.setup.compile_backend)
        return self.compiled[key]

    def close(self) -> None:
        for patch in self.patches:
            patch.unpatch()
        self.patches.clear()
        self.eager.clear()
        self.compiled.clear()


@contextmanager
def recompile_limits() -> Iterator[None]:
    """Dynamo stops compiling a function after a few recompilations (8 by default) and runs it
    eagerly from then on, silently; every configuration's copy of the model is one more."""
    import torch._dynamo.config as config

    names = [n for n in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                         "accumulated_cache_size_limit") if hasattr(config, n)]
    saved = {n: getattr(config, n) for n in names}
    try:
        for name in names:
            setattr(config, name, max(saved[name], RECOMPILE_LIMIT))
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def _warm(functions: dict[str, Callable[[], Any]], device: torch.device
          ) -> tuple[dict[str, Callable[[], Any]], dict[str, str], dict[str, float]]:
    """Each function's warm-up calls; returns the ones that ran, the errors of the others, and
    each one's warm-up seconds (a compile's)."""
    import torch

    ready, errors, seconds = {}, {}, {}
    for name, fn in functions.items():
        begin = time.perf_counter()
        try:
            for _ in range(WARMUP_CALLS if device.type == "cuda" else 1):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # a compiler or capture failure is a finding, not a crash
            errors[name] = error_summary(exc, limit=300)
            try:
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except Exception:
                pass
            continue
        seconds[name] = round(time.perf_counter() - begin, 2)
        ready[name] = fn
    return ready, errors, seconds


@dataclass
class Record:
    """What the batches left behind, for verify.json: per-figure summaries of the last batch a
    configuration was timed in, errors, compile seconds."""

    last: dict[tuple[str, Config], dict[str, dict[str, Any]]] = field(default_factory=dict)
    rounds: dict[tuple[str, Config], ConfigRounds] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    compile_seconds: dict[str, float] = field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)  # mode -> device meta


def time_configs(functions: dict[str, Callable[[], Any]], setup: Setup
                 ) -> tuple[dict[str, ConfigRounds], dict[str, Any]]:
    """Wall time per synchronized forward and device time per forward of every function, each
    figure in its own interleaved rounds, half of the batch's budget each; returns the
    per-round times by name and how the device time was taken."""
    raw: dict[str, dict[str, list[float]]] = {WALL: {}, DEVICE: {}, HOST: {}}
    half = setup.budget_s / 2
    wall = time_wall(functions, setup.device, setup.rounds, half, raw[WALL])
    device = time_device(functions, setup.device, setup.rounds, half, raw[DEVICE])
    meta = {k: device.get(k) for k in ("method", "protocol", "notes")}
    meta.update(wall_rounds=wall.get("rounds"), device_rounds=device.get("rounds"))
    if setup.device.type == "cuda":  # informational: what each configuration costs the host
        host = time_host(functions, setup.device, raw=raw[HOST])
        meta.update(host_protocol=host["protocol"], host_dropped=host["dropped"])
    return {name: ConfigRounds({f: raw[f].get(name, []) for f in (*FIGURES, HOST)})
            for name in functions}, meta


def _batch_measure(setup: Setup, models: Models, mode: str, record: Record
                   ) -> Callable[[list[Config]], Batch]:
    """`measure(configs)` for the ablation of `mode` (EAGER or COMPILE)."""
    from autokernel.profiling.model_loader import call_forward

    def runner(config: Config) -> Callable[[], Any]:
        model = (models.eager_model(config) if mode == EAGER
                 else models.compiled_model(COMPILE, config))
        return lambda: call_forward(model, setup.inputs)

    def measure(configs: list[Config]) -> Batch:
        names = {label(c): c for c in configs}
        functions: dict[str, Callable[[], Any]] = {}
        batch: Batch = {}
        for name, config in names.items():
            try:
                functions[name] = runner(config)
            except Exception as exc:
                batch[config] = ConfigRounds(error=error_summary(exc, limit=300))
        ready, errors, seconds = _warm(functions, setup.device)
        if mode == COMPILE:
            record.compile_seconds.update({f"compile {n}": s for n, s in seconds.items()})
        for name, error in errors.items():
            batch[names[name]] = ConfigRounds(error=error)
            record.errors[f"{mode} {name}"] = error
        if not ready:
            return batch
        timed, meta = time_configs(ready, setup)
        record.methods[mode] = meta
        for name in ready:
            batch[names[name]] = record.rounds[(mode, names[name])] = timed[name]
        return batch

    return measure


def _memo(measure: Callable[[list[Config]], Batch]) -> Callable[[list[Config]], Batch]:
    """`measure`, answering a batch of the very configurations it timed before from that batch
    (two ablations of the same measurements start from the same first batch)."""
    done: dict[tuple[Config, ...], Batch] = {}

    def measure_once(configs: list[Config]) -> Batch:
        key = tuple(configs)
        if key not in done:
            done[key] = measure(configs)
        return done[key]

    return measure_once


def _summary(rounds: ConfigRounds | None, figure: str) -> dict[str, Any] | None:
    values = (rounds.rounds.get(figure) if rounds is not None else None) or []
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)

    def quantile(q: float) -> float:
        position = (n - 1) * q
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return Timing("", quantile(0.5), quantile(0.75) - quantile(0.25), n).to_dict()


def _deliveries(setup: Setup, models: Models, record: Record, chosen: dict[str, list[str]]
                ) -> dict[str, Any]:
    """The graph deliveries and plain torch.compile, timed in one batch of wall times."""
    from autokernel.profiling.model_loader import call_forward

    contestants: dict[str, Delivery] = {}
    modes = (COMPILE, REDUCE_OVERHEAD, CUDA_GRAPH) if setup.compile else (CUDA_GRAPH,)
    for mode in modes:
        contestants[mode] = Delivery(mode)
        if chosen.get(mode):
            contestants[f"{mode}+kernels"] = Delivery(mode, tuple(chosen[mode]))
    functions = {}
    for name, delivery in contestants.items():
        model = models.compiled_model(delivery.mode, frozenset(delivery.kernels))
        functions[name] = (lambda m=model: call_forward(m, setup.inputs))
    ready, errors, seconds = _warm(functions, setup.device)
    record.compile_seconds.update({n: s for n, s in seconds.items() if n != CUDA_GRAPH})
    for name, error in errors.items():
        record.errors[f"delivery {name}"] = error
        setup.note(f"{contestants[name].label} failed and is not a delivery: {error}")
    raw: dict[str, list[float]] = {}
    timing = time_wall(ready, setup.device, setup.rounds, setup.budget_s, raw) if ready else {}
    return {"contestants": {n: contestants[n] for n in ready},
            "wall": {n: ConfigRounds({WALL: raw.get(n, [])}) for n in ready},
            "rounds": timing.get("rounds"), "errors": errors}


def measure_in_context(setup: Setup) -> dict[str, Any]:
    """Ablations, deliveries and the four classic contestants (see the module doc)."""
    import torch

    models = Models(setup)
    record = Record()
    candidates = [k.tag for k in setup.kernels.kernels]
    ablations: dict[str, Ablation] = {}
    graphs = setup.device.type == "cuda"
    try:
        with torch.no_grad(), recompile_limits():
            setup.emit(f"in-context selection, eager: {len(candidates)} kernels, each "
                       "configuration timed in the same rounds (wall and device time)")
            judging = {"judged": setup.judged, "forced_reason": setup.forced_reason}
            eager = _memo(_batch_measure(setup, models, EAGER, record))
            ablations[EAGER] = ablate(EAGER, candidates, eager, **judging)
            if graphs:  # a CUDA graph replays the eager kernels: judged by device time alone
                ablations[CUDA_GRAPH] = ablate(CUDA_GRAPH, candidates, eager, primary=DEVICE,
                                               secondary=(), **judging)
            if setup.compile:
                setup.emit("in-context selection under torch.compile: each configuration "
                           "compiled with its kernels in the graph")
                compiled = _memo(_batch_measure(setup, models, COMPILE, record))
                ablations[COMPILE] = ablate(COMPILE, candidates, compiled, **judging)
                if graphs:
                    ablations[REDUCE_OVERHEAD] = ablate(REDUCE_OVERHEAD, candidates, compiled,
                                                        primary=DEVICE, secondary=(), **judging)
            chosen = {mode: a.chosen for mode, a in ablations.items()}
            deliveries: dict[str, Any] = {}
            if setup.device.type == "cuda":
                setup.emit("timing the deliveries: torch.compile, reduce-overhead and CUDA "
                           "graphs, without and with the selected kernels")
                deliveries = _deliveries(setup, models, record, chosen)
    finally:
        models.close()
    return assemble(ablations, record, deliveries, setup.device.type == "cuda")


def _classic(ablations: dict[str, Ablation], record: Record) -> dict[str, dict[str, Any]]:
    """verify.json's four contestants per figure: eager, patched, compile, patched_compile."""
    figures: dict[str, dict[str, Any]] = {DEVICE: {}, WALL: {}}
    names = {EAGER: ("eager", "patched"), COMPILE: ("compile", "patched_compile")}
    for mode, (plain, patched) in names.items():
        found = ablations.get(mode)
        if found is None:
            continue
        for name, config in ((plain, frozenset()), (patched, frozenset(found.chosen))):
            for figure in FIGURES:
                summary = _summary(record.rounds.get((mode, config)), figure)
                if summary is not None:
                    figures[figure][name] = summary
    return figures


def _vs(rows: list[dict[str, Any]], best: dict[str, Any],
        rounds: dict[str, tuple[str, ConfigRounds | None]]) -> dict[str, Any]:
    """The delivered row's wall-time speedup over each baseline delivery (no kernel): paired
    (median of per-round ratios, 95% interval) where both were timed in one batch, else the
    ratio of medians, marked unpaired."""
    from autokernel.harness.paired import paired_speedup, round_ratios

    found = {}
    mine_batch, mine = rounds[best["label"]]
    for row in rows:
        if row["delivery"]["kernels"] or row["label"] == best["label"]:
            continue
        batch, theirs = rounds[row["label"]]
        entry: dict[str, Any] = {"ratio": row["wall"]["median_us"] / best["wall"]["median_us"],
                                 "paired": None}
        if batch == mine_batch and mine is not None and theirs is not None:
            paired = paired_speedup([round_ratios(theirs.rounds.get(WALL, []),
                                                  mine.rounds.get(WALL, []))])
            if paired is not None:
                entry["paired"] = {"estimate": paired.estimate, "low": paired.low,
                                   "high": paired.high, "rounds": paired.rounds}
        found[row["delivery"]["mode"]] = entry
    return found


def _tolerance(row: dict[str, Any], figure: str) -> float:
    """Half a row's relative IQR in one figure: the noise allowed when it is held against
    another delivery's median."""
    timing = row.get(figure) or {}
    return 0.5 * timing["iqr_us"] / timing["median_us"] if timing.get("median_us") else 0.0


def choose(table: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The delivery to give the user, and why: the fastest in wall time among those that are
    no slower than the reference, the faster (in wall time) of plain torch.compile and
    reduce-overhead (else of every delivery without kernels), in wall time and in device time,
    each within the two medians' noise. The reference qualifies itself, so the delivered model
    is never measured slower than what torch.compile gives for free, in either figure."""
    plain = [r for r in table if not r["delivery"]["kernels"]]
    compiled = [r for r in plain if r["delivery"]["mode"] in (COMPILE, REDUCE_OVERHEAD)]
    reference = min(compiled or plain or table, key=lambda r: r["wall"]["median_us"])

    def no_slower(row: dict[str, Any], figure: str) -> bool:
        mine, theirs = row.get(figure), reference.get(figure)
        if not mine or not theirs:
            return figure == DEVICE  # a device time not measured: judged by wall time alone
        allowed = 1.0 + _tolerance(row, figure) + _tolerance(reference, figure)
        return mine["median_us"] <= theirs["median_us"] * allowed

    eligible = [r for r in table if no_slower(r, WALL) and no_slower(r, DEVICE)]
    best = min(eligible, key=lambda r: r["wall"]["median_us"])
    mode = reference["delivery"]["mode"]
    if best is reference:
        return best, (f"{mode} without kernels is the reference (the faster torch.compile mode "
                      "in wall time) and no delivery with kernels beat it in both wall and "
                      "device time")
    return best, (f"the fastest wall time per synchronized forward of the deliveries no slower "
                  f"than {mode} without kernels in wall and device time")


def assemble(ablations: dict[str, Ablation], record: Record, deliveries: dict[str, Any],
             meaningful: bool) -> dict[str, Any]:
    """The sections verify.json gets from the in-context measurements, and the delivery."""
    classic = _classic(ablations, record)
    options: list[tuple[Delivery, ConfigRounds | None, str]] = []
    if EAGER in ablations:
        eager = ablations[EAGER]
        for config in (frozenset(), frozenset(eager.chosen)):
            options.append((Delivery(EAGER, tuple(sorted(config))),
                            record.rounds.get((EAGER, config)), "eager"))
    for name, delivery in deliveries.get("contestants", {}).items():
        options.append((delivery, deliveries["wall"][name], "deliveries"))
    table, rounds = [], {}
    for delivery, timed, batch in options:
        wall = _summary(timed, WALL)
        if wall is None or delivery.label in rounds:
            continue  # not timed, or an empty selection's repeat of the plain model
        # a delivery's device time: its kernels' configuration, timed in its ablation
        device = _summary(record.rounds.get((KERNEL_MODE[delivery.mode],
                                             frozenset(delivery.kernels))), DEVICE)
        table.append({"delivery": delivery.to_dict(), "label": delivery.label, "wall": wall,
                      "device": device, "batch": batch})
        rounds[delivery.label] = (batch, timed)
    chosen = None
    if meaningful and len(table) > 1:
        best, why = choose(table)
        chosen = dict(best["delivery"])
        chosen["why"] = why
        chosen["vs"] = _vs(table, best, rounds)
    elif EAGER in ablations:  # no deliveries timed: patched eager with the eager selection
        chosen = Delivery(EAGER, tuple(ablations[EAGER].chosen)).to_dict()
        chosen["why"] = ("the deliveries are timed on a GPU only: patched eager with the "
                         "kernels in-context selection kept")
    return {
        "ablation": [row.to_dict() for a in ablations.values() for row in a.rows],
        "ablations": {mode: {k: v for k, v in a.to_dict().items() if k != "rows"}
                      for mode, a in ablations.items()},
        "selection": {mode: list(a.chosen) for mode, a in ablations.items()},
        "deliveries": table,
        "delivery": chosen,
        "classic": classic,
        "methods": record.methods,
        "errors": record.errors,
        "compile_seconds": record.compile_seconds,
        "delivery_rounds": deliveries.get("rounds"),
    }
