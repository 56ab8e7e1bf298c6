"""verify's rule for the compiled path: patched + torch.compile never slower than torch.compile.

verify patches its model with `under_compile="transparent"`: compile-transparent kernels
(triton_ops, whose Triton launches Inductor sees and fuses around) go into the compiled graph;
opaque ones (custom_ops) are left to Inductor from the start, with the reason their host code did
not trace. When the patched compiled model's device time is still above plain torch.compile's
(medians, on a GPU), verify leaves kernels out of the compiled path and times both again:

1. first the kernels in the graph whose standalone device time lost to torch.compile at their
   profiled shape (speedup_vs_compile ≤ 1, or never measured);
2. then every kernel still in the graph (the compiled model is then plain torch.compile's).

Each attempt, what it left out and why, and the final choice land in verify.json
(`compiled_path`) and in verify's printed lines. `next_left_out` is the decision alone, so it is
tested with made-up timings; the timing itself needs a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

RULE = ("patched torch.compile must be at least as fast as torch.compile (device-time medians); "
        "while it is slower, kernels are left to Inductor and both timed again: first those "
        "slower than torch.compile alone at their profiled shape, then all")
SLOWER_ALONE = "slower than torch.compile alone at its profiled shape (or not measured)"
STILL_LOSING = "patched torch.compile still slower than torch.compile"


def next_left_out(ratio: float | None, in_graph: list[str], left_out: list[str],
                  speedup_vs_compile: Mapping[str, float | None]
                  ) -> tuple[list[str], str] | None:
    """The kernels to leave out next and why, or None when the rule is met (or nothing is left
    to take out). `ratio`: torch.compile's device time over patched torch.compile's."""
    if ratio is None or ratio >= 1.0:
        return None
    still_in = [tag for tag in in_graph if tag not in left_out]
    if not still_in:
        return None
    slower = [tag for tag in still_in
              if speedup_vs_compile.get(tag) is None or speedup_vs_compile[tag] <= 1.0]
    if slower and len(slower) < len(still_in):
        return slower, SLOWER_ALONE
    return still_in, STILL_LOSING


def settle(ratio: float | None, in_graph: list[str], opaque: Mapping[str, str],
           speedup_vs_compile: Mapping[str, float | None], meaningful: bool,
           retime: Callable[[list[str]], float | None]) -> dict[str, Any]:
    """Apply the rule: `retime(left_out)` re-patches with those kernels left out, times
    torch.compile and patched torch.compile again and returns the new ratio."""
    result: dict[str, Any] = {  # opaque: tag -> its compile_path label
        "rule": RULE, "in_graph": list(in_graph), "opaque": dict(opaque),
        "first_ratio": ratio, "attempts": [], "left_out": {}, "ratio": ratio,
        "applied": meaningful}
    if not meaningful:
        result["note"] = "not applied on the CPU: the interpreter's timings mean nothing"
        return result
    left_out: list[str] = []
    while (step := next_left_out(result["ratio"], in_graph, left_out,
                                 speedup_vs_compile)) is not None:
        tags, why = step
        left_out += tags
        for tag in tags:
            result["left_out"][tag] = why
        result["ratio"] = retime(list(left_out))
        result["attempts"].append({"left_out": list(left_out), "why": why,
                                   "patched_compile_vs_compile": result["ratio"]})
    return result


def compiled_path_lines(compiled: Mapping[str, Any]) -> list[str]:
    """verify's printed account of the compiled path (empty for a verify.json without one)."""
    if not compiled:
        return []
    lines = []
    in_graph = ", ".join(compiled.get("in_graph", [])) or "none"
    lines.append(f"compiled path: compile-transparent kernels in the graph: {in_graph}")
    for tag, why in compiled.get("opaque", {}).items():
        lines.append(f"  {tag} left to Inductor: {why}")
    if not compiled.get("applied"):
        if compiled.get("note"):
            lines.append(f"  rule ({RULE}): {compiled['note']}")
        return lines
    for attempt in compiled.get("attempts", []):
        ratio = attempt["patched_compile_vs_compile"]
        figure = f"{ratio:.3f}×" if ratio is not None else "not timed"
        lines.append(f"  left out {', '.join(attempt['left_out'])} ({attempt['why']}): "
                     f"patched torch.compile {figure} vs torch.compile")
    ratio = compiled.get("ratio")
    if ratio is not None:
        verdict = "met" if ratio >= 1.0 else "NOT met (nothing left to take out)"
        lines.append(f"  rule: patched torch.compile ≥ torch.compile: {verdict} at {ratio:.3f}×")
    return lines
