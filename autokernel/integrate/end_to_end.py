"""verify's end-to-end figures: device time and wall time per forward, two figures kept apart.

For each contestant (eager, torch.compile, patched eager, patched torch.compile):

- **Device time per forward**: how long the GPU is busy with one forward when the host is not in
  the way. Each forward is captured once into a CUDA graph and its replays are timed with the
  harness's device-time protocol (`autokernel.harness.timing.DeviceTimer`: CUDA events around
  each replay, L2 flushed before it, the batch queued behind a spin kernel, random order within
  each round). A graph replay launches the whole forward at once, so a forward whose eager
  launches take longer than its kernels (a small, host-bound one) is still timed by its GPU work.
  When any contestant cannot be captured (a `.item()`, a host copy, a capture error), every
  contestant is timed as a plain forward queued ahead by the same protocol instead (one round
  per batch, to stay inside the launch queue), so both sides of every ratio are timed alike; the
  method is recorded and said. This is the figure KernelBench's speedups and the Amdahl check use:
  the kernels were judged by the same protocol.
- **Wall time per synchronized forward** (`time_synchronous_calls`): one forward bracketed by
  synchronize, host launch included: what an eager caller waiting for each forward pays. Where
  the forward is host-bound this is mostly launch cost, not GPU work.

Both land in verify.json (`timing.device`, `timing.wall`, `speedup.device`, `speedup.wall`; schema
2). A verify.json from before schema 2 holds only the wall figure, at `timing.contestants` and
flat in `speedup`; `figure()` and `speedup_figure()` read either. On the CPU both are host-clock
figures of the Triton interpreter and say nothing about a GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autokernel.device import CPU_TIMING_NOTE
from autokernel.harness.timing import iqr, median
from autokernel.text import count_of, error_summary, format_latency, markdown_cell

if TYPE_CHECKING:
    import torch

    from autokernel.integrate.loader import FinishedRun

SCHEMA = 2
DEVICE, WALL = "device", "wall"
LABELS = {"eager": "eager", "compile": "torch.compile", "patched": "patched eager",
          "patched_compile": "patched torch.compile"}
GRAPH_METHOD = "cuda-graph"
QUEUED_METHOD = "queued-forward"
HOST_CLOCK_METHOD = "host-clock"
DEVICE_PROTOCOLS = {
    GRAPH_METHOD: "each forward captured once in a CUDA graph; replays timed by CUDA events with "
                  "autokernel.harness.timing.DeviceTimer (L2 flushed before each replay, batches "
                  "queued behind a spin kernel, random order within a round); median and IQR "
                  "over rounds",
    QUEUED_METHOD: "a forward could not be captured in a CUDA graph: each plain forward timed by "
                   "CUDA events with autokernel.harness.timing.DeviceTimer (queued behind a spin "
                   "kernel so the host runs ahead, one round per batch, L2 flushed before each "
                   "forward); median and IQR over rounds",
    HOST_CLOCK_METHOD: "cpu: host clock per forward (Triton interpreter; no device)",
}
METHOD_LABELS = {GRAPH_METHOD: "CUDA-graph replays timed by CUDA events",
                 QUEUED_METHOD: "plain forwards queued ahead, timed by CUDA events",
                 HOST_CLOCK_METHOD: "host clock, no device"}
WALL_PROTOCOL = ("autokernel.harness.timing.time_synchronous_calls: wall time of one synchronized "
                 "forward (host launch included), rotating order, L2 flush; median and IQR")
# Below this share of its wall time spent on the device, eager's forward is called host-bound.
HOST_BOUND_DEVICE_SHARE = 0.5


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


Contestants = dict[str, Callable[[], Any]]


# ---------------------------------------------------------------------------------------------
# Measuring


def time_wall(contestants: Contestants, device: torch.device, rounds: int | None,
              budget_s: float, raw: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Wall time per synchronized forward, interleaved rounds (the `timing.wall` section).
    `raw`, when given, receives each contestant's per-round times (round r at index r)."""
    from autokernel.harness.timing import (
        host_seconds, make_flush_buffer, rounds_for, time_synchronous_calls,
    )

    if rounds is None:
        round_s = sum(host_seconds(fn, device) for fn in contestants.values())
        rounds = rounds_for(budget_s, round_s, device, quick=False)
    samples = time_synchronous_calls(list(contestants.items()), rounds, device,
                                     make_flush_buffer(device))
    if raw is not None:
        raw.update({name: list(s.latency_us) for name, s in samples.items()})
    timings = {name: Timing(name, s.median_us, s.iqr_us, len(s.latency_us))
               for name, s in samples.items()}
    return {"protocol": WALL_PROTOCOL, "rounds": rounds,
            "contestants": {name: t.to_dict() for name, t in timings.items()}}


HOST_ROUNDS = 10
HOST_PROTOCOL = ("host time of one forward while the GPU is held busy by a spin kernel queued "
                 "first (so every launch only enqueues): the Python and launch cost a forward "
                 "pays on the host, whatever the GPU does; median over rounds")


def time_host(contestants: Contestants, device: torch.device, rounds: int = HOST_ROUNDS,
              raw: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Host time per forward (a GPU only): each call queued behind a spin long enough to
    outlast its launches, timed on the host clock from call to return. A sample whose spin
    ended before the call returned (the host fell behind) is dropped."""
    import torch

    from autokernel.harness.timing import MAX_SPIN_US, Spinner, host_seconds

    spinner = Spinner()
    spinner.calibrate()
    hold = {name: min(MAX_SPIN_US, 3e6 * host_seconds(fn, device) + 200.0)
            for name, fn in contestants.items()}
    samples: dict[str, list[float]] = {name: [] for name in contestants}
    dropped = 0
    names = list(contestants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda.synchronize(device)
            spinner.hold(hold[name])
            gate = torch.cuda.Event()
            gate.record()
            began = time.perf_counter()
            contestants[name]()
            elapsed = time.perf_counter() - began
            ahead = not gate.query()
            torch.cuda.synchronize(device)
            if ahead:
                samples[name].append(elapsed * 1e6)
            else:
                dropped += 1
    if raw is not None:
        raw.update(samples)
    return {"protocol": HOST_PROTOCOL, "rounds": rounds, "dropped": dropped,
            "contestants": {name: Timing(name, median(v), iqr(v), len(v)).to_dict()
                            for name, v in samples.items() if v}}


def capture_forward(forward: Callable[[], Any], device: torch.device) -> Callable[[], None]:
    """One forward captured in a CUDA graph; returns its replay. The caller holds no_grad."""
    import torch

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        forward()  # lazily made state (cuBLAS workspaces, autotuning) is set up before capture
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    torch.cuda.synchronize(device)
    return graph.replay


def capture_all(contestants: Contestants, device: torch.device
                ) -> tuple[Contestants | None, str | None]:
    """Every contestant's graph replay, or (None, why one could not be captured)."""
    from autokernel.integrate.delivery import settle_failed_capture

    replays: Contestants = {}
    for name, forward in contestants.items():
        try:
            replays[name] = capture_forward(forward, device)
        except Exception as exc:  # a forward that synchronizes or copies to the host
            settle_failed_capture(device)
            return None, f"{LABELS.get(name, name)}: {error_summary(exc, limit=200)}"
    return replays, None


def time_device(contestants: Contestants, device: torch.device, rounds: int | None,
                budget_s: float, raw: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Device time per forward of every contestant (the `timing.device` section). `raw`, when
    given, receives each contestant's per-round times (round r at index r)."""
    from autokernel.harness.timing import DeviceTimer, make_flush_buffer, rounds_for

    notes: list[str] = []
    calls = contestants
    max_calls = None
    if device.type != "cuda":
        method = HOST_CLOCK_METHOD
    else:
        replays, why_not = capture_all(contestants, device)
        if replays is not None:
            method, calls = GRAPH_METHOD, replays
        else:
            method = QUEUED_METHOD
            max_calls = len(contestants)  # one round per batch: a forward launches many kernels
            notes.append(f"no CUDA graph ({why_not}): every forward timed queued ahead instead")
    options = {} if max_calls is None else {"max_calls_per_batch": max_calls}
    timer = DeviceTimer(list(calls.items()), lambda r, name: ((), None),
                        lambda r, name, out, token: None, device, make_flush_buffer(device),
                        **options)
    round_s = timer.pilot()
    if rounds is None:
        rounds = rounds_for(budget_s, round_s, device, quick=False)
    timed = timer.run(rounds)
    if raw is not None:
        raw.update({name: list(s.latency_us) for name, s in timed.samples.items()})
    if timed.synchronizing:
        notes.append(f"{', '.join(LABELS.get(n, n) for n in timed.synchronizing)} wait for the "
                     "GPU inside the forward: timed alone, that wait included")
    if timed.host_bound_batches:
        notes.append(f"in {timed.host_bound_batches} batch(es) the host fell behind the GPU: "
                     "those forwards' device times include launch gaps")
    return {
        "method": method, "protocol": DEVICE_PROTOCOLS[method], "rounds": rounds,
        "calls_per_round": timed.calls_per_round,
        "contestants": {name: Timing(name, s.median_us, s.iqr_us, len(s.latency_us)).to_dict()
                        for name, s in timed.samples.items()},
        "notes": notes,
    }


# ---------------------------------------------------------------------------------------------
# Speedups, and reading either schema


def speedups(contestants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ratios of one figure's medians: patched eager against eager and torch.compile, and the
    noise of the first (the combined relative IQR)."""
    eager, patched = contestants.get("eager"), contestants.get("patched")
    compiled, patched_compiled = contestants.get("compile"), contestants.get("patched_compile")
    result: dict[str, Any] = {}
    if eager and patched:
        result["vs_eager"] = eager["median_us"] / patched["median_us"]
        result["noise"] = math.hypot(eager["iqr_us"] / eager["median_us"],
                                     patched["iqr_us"] / patched["median_us"])
    if compiled and patched:
        result["vs_compile"] = compiled["median_us"] / patched["median_us"]
    if compiled and eager:
        result["compile_vs_eager"] = eager["median_us"] / compiled["median_us"]
    if compiled and patched_compiled:
        result["patched_compile_vs_compile"] = (compiled["median_us"]
                                                / patched_compiled["median_us"])
    return result


def figure(result: dict[str, Any], which: str) -> dict[str, Any] | None:
    """`timing.device` or `timing.wall` of a verify result; a file from before schema 2 has only
    the wall figure (at `timing.contestants`), and no device figure (None)."""
    timing = result.get("timing", {})
    if which in timing:
        return timing[which]
    if which == WALL and "contestants" in timing:
        return {"protocol": timing.get("protocol", WALL_PROTOCOL), "rounds": timing.get("rounds"),
                "contestants": timing["contestants"]}
    return None


def speedup_figure(result: dict[str, Any], which: str) -> dict[str, Any]:
    """`speedup.device` or `speedup.wall`; before schema 2 the flat `speedup` was the wall one."""
    speedup = result.get("speedup", {})
    if DEVICE in speedup or WALL in speedup:
        return speedup.get(which) or {}
    return dict(speedup) if which == WALL else {}


def host_bound_share(result: dict[str, Any]) -> float | None:
    """Eager's device time as a share of its wall time per synchronized forward."""
    device, wall = figure(result, DEVICE), figure(result, WALL)
    if not device or not wall:
        return None
    d, w = device["contestants"].get("eager"), wall["contestants"].get("eager")
    if not d or not w or not w["median_us"]:
        return None
    return d["median_us"] / w["median_us"]


# ---------------------------------------------------------------------------------------------
# Amdahl and host cost


def combined_amdahl(parts: list[tuple[float, float]]) -> float | None:
    """End-to-end speedup when each share s of the time runs k× faster: 1/((1-Σs) + Σ s/k)."""
    if not parts or any(k is None or k <= 0 for _, k in parts):
        return None
    shares = sum(s for s, _ in parts)
    remaining = max(0.0, 1.0 - shares) + sum(s / k for s, k in parts)
    return 1.0 / remaining if remaining > 0 else None


def amdahl_check(parts: list[dict[str, Any]], measured: float | None, noise: float | None,
                 meaningful: bool) -> dict[str, Any]:
    """The Amdahl estimate from the routed kernels' shares and device-time speedups, against the
    measured end-to-end device-time speedup: they agree when they differ by no more than the
    noise (relative IQR). The message names no figure printed elsewhere."""
    estimate = combined_amdahl([(p["share"], p["kernel_speedup"]) for p in parts])
    result: dict[str, Any] = {"estimate_vs_eager": estimate, "parts": parts,
                              "measured_vs_eager": measured, "measured_figure": DEVICE,
                              "noise": noise, "agrees": None, "message": ""}
    if estimate is None or measured is None:
        result["message"] = "no Amdahl estimate: " + (
            "no kernel was routed" if not parts else "no end-to-end device time"
            if measured is None else "a routed kernel has no measured speedup")
        return result
    difference = measured / estimate - 1.0
    result["difference"] = difference
    if not meaningful:
        result["message"] = "not compared on the CPU interpreter"
        return result
    noise = noise or 0.0
    result["agrees"] = abs(difference) <= noise
    if result["agrees"]:
        result["message"] = ("the measured device-time speedup agrees with it within the noise "
                             f"(±{noise:.1%})")
    else:
        result["message"] = (
            f"the measured device-time speedup differs from it by {difference:+.1%}, more than "
            f"the noise (±{noise:.1%}): the kernels were timed alone on cold-L2 inputs at the "
            "profiled shapes; in the model, cache reuse, other shapes and the kernels the "
            "routing leaves to PyTorch change that")
    return result


def host_cost(run: FinishedRun, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The host time the routed calls add per forward, from the harness's launch figures of each
    best kernel (one synchronous call's wall time minus its device time) against eager PyTorch's.

    A separate figure from the device-time speedups: in a forward that is host-bound (eager's
    launches take longer than its kernels), this is what a kernel that is faster on the device
    can still cost. The routing's own Python is not in it."""
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
            "figures, routing not included): where eager's forward is host-bound, the wall time "
            "pays it in full")


# ---------------------------------------------------------------------------------------------
# Presentation


def _cell(t: dict[str, Any] | None) -> str:
    return f"{format_latency(t['median_us'])} (IQR {format_latency(t['iqr_us'])})" if t else "–"


def _ratios(speedup: dict[str, Any]) -> str:
    parts = []
    if speedup.get("vs_eager") is not None:
        parts.append(f"{speedup['vs_eager']:.3f}× vs eager")
    if speedup.get("vs_compile") is not None:
        parts.append(f"{speedup['vs_compile']:.3f}× vs torch.compile")
    if speedup.get("patched_compile_vs_compile") is not None:
        parts.append(f"patched+compile {speedup['patched_compile_vs_compile']:.3f}× vs "
                     "torch.compile")
    if not parts:
        return ""
    noise = speedup.get("noise")
    return ", ".join(parts) + (f" (noise ±{noise * 100:.1f}%)" if noise is not None else "")


def timing_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The timed contestants as a table: its headers and one row per contestant (none when
    nothing was timed). The terminal fits it to its width (autokernel.tables)."""
    device, wall = figure(result, DEVICE), figure(result, WALL)
    device_times = (device or {}).get("contestants", {})
    wall_times = (wall or {}).get("contestants", {})
    def rounds(timed: dict[str, Any] | None) -> str:
        count = (timed or {}).get("rounds")
        return f" ({count_of(count, 'round')})" if isinstance(count, int) else ""

    headers = ["", f"device time per forward{rounds(device)}",
               f"wall time per synchronized forward{rounds(wall)}"]
    rows = [[label, _cell(device_times.get(name)), _cell(wall_times.get(name))]
            for name, label in LABELS.items() if name in device_times or name in wall_times]
    return headers, rows


def end_to_end_lines(result: dict[str, Any], *, cpu_note: bool = True,
                     table: bool = True) -> list[str]:
    """The end-to-end figures, each printed once (verify's output, and the report's section).
    `cpu_note=False` where the caller says the CPU caveat itself; `table=False` where the
    caller shows `timing_table` itself."""
    timing = result.get("timing", {})
    device, wall = figure(result, DEVICE), figure(result, WALL)
    device_times = (device or {}).get("contestants", {})
    wall_times = (wall or {}).get("contestants", {})
    lines = []
    headers, rows = timing_table(result)
    if rows and table:
        lines.append(f"{headers[0]:<22} {headers[1]:<26} {headers[2]}")
        lines += [f"{label:<22} {device_cell:<26} {wall_cell}"
                  for label, device_cell, wall_cell in rows]
    for name, error in timing.get("errors", {}).items():
        lines.append(f"{LABELS.get(name, name):<22} failed: {error}")
    device_ratios = _ratios(speedup_figure(result, DEVICE))
    if device_ratios:
        method = (device or {}).get("method", "")
        lines.append(f"end to end, device time ({METHOD_LABELS.get(method, method)}): "
                     f"{device_ratios}")
    elif wall_times:
        lines.append("end to end, device time: not measured (a verify.json from before device "
                     "times were kept; run `autokernel verify` again)")
    wall_ratios = _ratios(speedup_figure(result, WALL))
    if wall_ratios:
        share = host_bound_share(result)
        bound = (f"; host-bound here: eager's device time is {share:.0%} of its wall time"
                 if share is not None and share < HOST_BOUND_DEVICE_SHARE
                 and timing.get("meaningful", True) else "")
        # verify times the eager configurations before it compiles anything (in_context.py)
        order = ("; eager and patched eager timed before torch.compile ran in the process"
                 if (wall or {}).get("compiled_rounds") is not None else "")
        lines.append(f"wall time per synchronized forward (host launch included{bound}{order}): "
                     f"{wall_ratios}")
    for note in (device or {}).get("notes", []):
        lines.append(f"device time: {note}")
    if timing.get("under_compile") == "inductor" and (
            "patched_compile" in device_times or "patched_compile" in wall_times):
        lines.append("patched torch.compile: the kernels step aside while torch.compile traces "
                     "(Inductor compiles the original ops); patch(model, under_compile="
                     "\"kernels\") puts them in the graph as custom ops")
    lines += selection_lines(result)
    amdahl = result.get("amdahl", {})
    if amdahl.get("estimate_vs_eager") is not None:
        lines.append(f"Amdahl estimate (plan shares × kernel device-time speedups vs eager): "
                     f"{amdahl['estimate_vs_eager']:.3f}× vs eager")
    if amdahl.get("message"):
        lines.append(("DISAGREE: " if amdahl.get("agrees") is False else "") + amdahl["message"])
    host_line = host_cost_line(result.get("host", {}))
    if host_line and timing.get("meaningful", True):
        lines.append(host_line)
    if cpu_note and not timing.get("meaningful", True):
        lines.append(CPU_TIMING_NOTE)
    return lines


# ---------------------------------------------------------------------------------------------
# In-context selection and the delivery


def _paired_text(paired: dict[str, Any] | None) -> str:
    if not paired:
        return "–"
    return f"{paired['estimate']:.3f}× ({paired['low']:.3f}–{paired['high']:.3f})"


def _ratio_text(summary: dict[str, Any], key: str, figure: str) -> str:
    """A paired figure of an ablation summary, or, with too few rounds to pair (the CPU), the
    ratio of medians."""
    paired = (summary.get(key) or {}).get(figure)
    if paired:
        return _paired_text(paired)
    anchor, chosen = (summary.get("anchor_us") or {}).get(figure), \
        (summary.get("chosen_us") or {}).get(figure)
    if key == "chosen_vs_none" and anchor and chosen:
        return f"{anchor / chosen:.3f}× (medians)"
    return "–"


def _kernels_text(tags: list[str]) -> str:
    return ", ".join(tags) if tags else "no kernel"


def selection_lines(result: dict[str, Any]) -> list[str]:
    """verify's account of in-context selection (a line per kernel and mode) and the delivery;
    empty for a verify.json from before it."""
    rows = result.get("ablation")
    if rows is None:
        return []
    lines = []
    for mode, summary in (result.get("ablations") or {}).items():
        figure = summary.get("primary", WALL)
        all_in = _ratio_text(summary, "all_vs_none", figure)
        if not summary.get("judged", True):
            reason = next((r["reason"] for r in rows if r["mode"] == mode), "")
            every = _ratio_text(summary, "chosen_vs_none", figure)  # chosen: all of them
            lines.append(f"in-context selection, {mode}: {reason}; every kernel vs none, "
                         f"{figure} time {every}")
            continue
        vs_none = _ratio_text(summary, "chosen_vs_none", figure)
        lines.append(f"in-context selection, {mode} (judged by {figure} time, paired rounds): "
                     f"kept {_kernels_text(summary['chosen'])}: {vs_none} vs no kernel "
                     f"(all kernels: {all_in}; {count_of(summary['batches'], 'batch')})")
        for row in (r for r in rows if r["mode"] == mode):
            host_with, host_without = row["with_us"].get("host"), row["without_us"].get("host")
            host = (f" host {host_with - host_without:+.1f} µs/forward;"
                    if host_with is not None and host_without is not None else "")
            lines.append(f"  {row['kernel']:<22} {row['decision']:<3} wall "
                         f"{_paired_text(row['speedup'].get(WALL)):<22} device "
                         f"{_paired_text(row['speedup'].get(DEVICE)):<22}{host} {row['reason']}")
        for config, error in (summary.get("errors") or {}).items():
            lines.append(f"  {config} failed: {error}")
    deliveries = result.get("deliveries") or []
    if len(deliveries) > 1:
        lines.append("deliveries: wall time per synchronized forward; device time of the same "
                     "kernels' configuration")
        for row in deliveries:
            kernels = row["delivery"]["kernels"]
            name = row["delivery"]["mode"] + (f" + {count_of(len(kernels), 'kernel')}"
                                              if kernels else "")
            device = _cell(row.get("device")) if row.get("device") else "–"
            lines.append(f"  {name:<28} wall {_cell(row['wall']):<26} device {device}")
    sentence = delivery_sentence(result)
    if sentence:
        lines.append(f"delivered: {sentence}; autokernel.load(DIR).optimize(model) gives it")
    return lines


def delivery_sentence(result: dict[str, Any]) -> str | None:
    """The delivery verify chose, its paired wall-time figures and why: 'reduce-overhead with no
    kernel; wall time 1.115× (1.105–1.126) vs compile, ...: <why>; its output PASS'. None for a
    verify that chose none (an older verify.json, or no GPU)."""
    chosen = result.get("delivery")
    if not chosen:
        return None
    accuracy = chosen.get("accuracy") or {}
    verdict = ("" if not accuracy else "; its output PASS" if accuracy.get("passed")
               else f"; its output FAIL ({accuracy.get('failure') or accuracy.get('rule')})")
    against = []
    for mode, entry in (chosen.get("vs") or {}).items():
        paired = entry.get("paired")
        against.append(f"{_paired_text(paired)} vs {mode}" if paired
                       else f"{entry['ratio']:.3f}× vs {mode} (medians of two batches)")
    versus = f"; wall time {', '.join(against)}" if against else ""
    return (f"{chosen['mode']} with {_kernels_text(chosen.get('kernels', []))}{versus}: "
            f"{chosen.get('why', '')}{verdict}")


def selection_markdown(result: dict[str, Any]) -> list[str]:
    """report.md's in-context selection: a table row per kernel and mode (the model's time with
    and without it, the paired speedups, the decision and why), then the deliveries."""
    rows = result.get("ablation")
    if not rows:
        return []
    lines = ["### In-context selection", "",
             "Each kernel timed in the whole model, with it and without it, in the same "
             "rounds; it stays in a mode only if removing it slows the model beyond the paired "
             "noise (95% interval) and speeds up neither figure. Speedup > 1: the model is "
             "faster with it.", "",
             "| kernel | mode | decision | with it (wall) | without (wall) | speedup wall | "
             "speedup device | host per forward | why |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        host_with, host_without = row["with_us"].get("host"), row["without_us"].get("host")
        host = (f"{host_with - host_without:+.1f} µs" if host_with is not None
                and host_without is not None else "–")
        lines.append("| " + " | ".join(markdown_cell(cell) for cell in (
            row["kernel"], row["mode"], row["decision"], format_latency(row["with_us"].get(WALL)),
            format_latency(row["without_us"].get(WALL)), _paired_text(row["speedup"].get(WALL)),
            _paired_text(row["speedup"].get(DEVICE)), host, row["reason"])) + " |")
    deliveries = result.get("deliveries") or []
    if deliveries:
        lines += ["", "| delivery | kernels | wall per forward | device per forward |",
                  "|---|---|---|---|"]
        for row in deliveries:
            kernels = ", ".join(row["delivery"]["kernels"]) or "none"
            device = _cell(row.get("device")) if row.get("device") else "–"
            lines.append(f"| {row['delivery']['mode']} | {markdown_cell(kernels)} | "
                         f"{_cell(row['wall'])} | {device} |")
    return lines
