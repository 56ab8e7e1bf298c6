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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autokernel.device import CPU_TIMING_NOTE
from autokernel.integrate.compiled_path import compiled_path_lines
from autokernel.text import count_of, error_summary, format_latency

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
              budget_s: float) -> dict[str, Any]:
    """Wall time per synchronized forward, interleaved rounds (the `timing.wall` section)."""
    from autokernel.harness.timing import (
        host_seconds, make_flush_buffer, rounds_for, time_synchronous_calls,
    )

    if rounds is None:
        round_s = sum(host_seconds(fn, device) for fn in contestants.values())
        rounds = rounds_for(budget_s, round_s, device, quick=False)
    samples = time_synchronous_calls(list(contestants.items()), rounds, device,
                                     make_flush_buffer(device))
    timings = {name: Timing(name, s.median_us, s.iqr_us, len(s.latency_us))
               for name, s in samples.items()}
    return {"protocol": WALL_PROTOCOL, "rounds": rounds,
            "contestants": {name: t.to_dict() for name, t in timings.items()}}


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
    import torch

    replays: Contestants = {}
    for name, forward in contestants.items():
        try:
            replays[name] = capture_forward(forward, device)
        except Exception as exc:  # a forward that synchronizes or copies to the host
            try:
                torch.cuda.synchronize(device)
            except Exception:
                pass
            return None, f"{LABELS.get(name, name)}: {error_summary(exc, limit=200)}"
    return replays, None


def time_device(contestants: Contestants, device: torch.device, rounds: int | None,
                budget_s: float) -> dict[str, Any]:
    """Device time per forward of every contestant (the `timing.device` section)."""
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
        # verify times the eager pair before it compiles anything (see verify._time_models)
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
    lines += compiled_path_lines(result.get("compiled_path") or {})
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
