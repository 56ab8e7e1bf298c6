"""The Claude agent's prompt: the role, the playbook, the target, the current best and its history.

The stable prefix (tools, role + playbook, then target + reference) carries `cache_control`, so an
overnight run pays full price for it about once per target; the per-experiment part (best kernel,
roofline, history, lessons, the planner's plans) follows. History stays bounded: one line per
attempt with its hypothesis (results.tsv's column), at most `history_limit` of the latest, runs of
unkept tuner configurations folded into one line, every kept step kept; the target's lessons.md
comes bounded by the loop (`autokernel.loop.lessons`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autokernel.agents.base import AgentContext, Attempt
from autokernel.agents.claude_tools import one_line
from autokernel.harness.result import BenchResult
from autokernel.loop.attempts import error_file
from autokernel.loop.results import FAILED_STATUSES

TUNER_PREFIX = "tuner:"  # the tuner's descriptions start so (autokernel.agents.tuner)
PROGRAM_FILE = "program.md"
PACKAGED_PROGRAM = Path(__file__).resolve().parent / PROGRAM_FILE
CACHE_CONTROL = {"type": "ephemeral"}

ROLE = """\
You are the optimization agent of autokernel, an overnight GPU-kernel optimizer. Each conversation \
is ONE experiment on ONE target: make kernel.py (Triton) faster at the target's profiled shapes \
while keeping it correct everywhere.

How an experiment works:
1. Read what you need (read_file / list_files; kernel.py is your draft).
2. Change kernel.py with edit_kernel (focused edits) or write_kernel (whole file), giving a \
one-line description and the hypothesis the change tests. check_kernel runs a static check.
3. Before ending your turn, compile_kernel (compiles the draft for Hopper sm_90: compiler errors, \
registers, spills, shared memory) and test_kernel (the harness's correctness and anti-cheat \
stages on small shapes, not timed: PASS or the full error and traceback). If either reports an \
error, fix the draft and check again: a draft only becomes an experiment when you end your turn, \
and one that fails then is a failed experiment (too many in a row end the target). Each tool has \
a few uses per experiment.
4. End your turn with a short summary. After your turn the harness checks correctness (many \
shapes, dtypes, adversarial inputs, anti-cheat scans) and benchmarks the kernel against PyTorch \
eager and torch.compile. The loop keeps it as a git commit only if it passes and beats the \
current best by more than the measured noise; otherwise it is reverted. A failed experiment's \
kernel.py and full error stay readable in attempts/NNNN/ (kernel.py, error.txt).

Block sizes, num_warps, num_stages and algorithm variants belong in TUNABLE_SPACE: when your \
kernel passes, a cheap model-based tuner sweeps its TUNABLE_SPACE with no LLM calls. Never spend \
an experiment on changing a tunable's value; spend it on a structural idea, and expose the knobs \
that idea needs. The playbook follows; obey its rules."""


def load_program(workspace: str | Path | None = None) -> str:
    """The playbook: the workspace's copy if there is one (users may edit it), else ours."""
    if workspace is not None:
        local = Path(workspace) / PROGRAM_FILE
        if local.is_file():
            return local.read_text()
    return PACKAGED_PROGRAM.read_text()


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def describe_target(context: AgentContext) -> str:
    target = context.target
    lines = [f"# Target: {target.kernel_type} (rank {target.rank})"]
    try:
        from autokernel.ops import get_spec

        spec = get_spec(target.kernel_type)
    except Exception:  # a registry entry that fails to import must not stop the agent
        spec = None
    shapes = [spec.format_shape(tuple(s)) if spec else "x".join(map(str, s)) for s in target.shapes]
    lines.append(
        f"- {target.share:.1%} of the model's GPU time ({target.time_ms:.3f} ms per forward, "
        f"{target.calls} calls); 2x on this kernel alone gives {target.amdahl_2x:.3f}x end to end"
    )
    bench = spec.format_shape(tuple(target.bench_shape)) if spec else target.bench_shape
    lines.append(f"- benchmarked shape: {bench}, dtype {target.dtype}")
    if len(shapes) > 1:
        lines.append(f"- all profiled shapes (most time first): {'; '.join(shapes[:8])}")
    if target.params:
        lines.append(f"- parameters at the call sites: {target.params}")
    if spec is not None:
        try:
            from autokernel.ops.spec import parse_dtype

            intensity = spec.arithmetic_intensity(
                tuple(target.bench_shape), parse_dtype(target.dtype)
            )
            bound = "compute-bound" if spec.compute_bound else "memory-bound"
            lines.append(
                f"- {bound} op type; arithmetic intensity at the benchmarked shape: "
                f"{intensity:.2f} FLOP/byte (minimum traffic)"
            )
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            pass  # an unusual shape or dtype: the line is a hint, not a requirement
        if spec.notes:
            lines.append(f"- note: {spec.notes}")
    lines += [
        "",
        "# reference.py (the oracle; kernel_fn must take its positional signature)",
        "```python",
        context.reference_source.rstrip(),
        "```",
    ]
    return "\n".join(lines)


def describe_best(best: BenchResult | None) -> str:
    if best is None:
        return "The current best has not been measured yet."
    if not best.passed:
        return f"The current best did not pass the harness: {best.status.value} {best.reason}"
    parts = [f"{_fmt(best.latency_us, '.2f', ' us')}"]
    if best.iqr_us is not None:
        parts.append(f"(IQR {best.iqr_us:.2f} us)")
    if best.throughput is not None:
        parts.append(f"= {best.throughput:.4g} {best.throughput_unit or ''}".rstrip())
    line = "Current best: " + " ".join(parts)
    if best.shapes:
        line += f" at shape {best.shapes[0]} {best.dtypes[0] if best.dtypes else ''}".rstrip()
    roof = []
    if best.pct_peak_measured is not None:
        roof.append(f"{best.pct_peak_measured:.0f}% of the measured ceiling")
    if best.pct_peak_datasheet is not None:
        roof.append(f"{best.pct_peak_datasheet:.0f}% of the datasheet roofline")
    if roof:
        line += "; " + ", ".join(roof)
    line += (
        f"; {_fmt(best.speedup_vs_eager, '.2f', 'x')} vs PyTorch eager, "
        f"{_fmt(best.speedup_vs_compile, '.2f', 'x')} vs torch.compile."
    )
    if len(best.timings) > 1:
        per_shape = ", ".join(
            f"{t.shape}: {t.latency_us:.1f} us"
            + (f" ({t.eager_us / t.latency_us:.2f}x eager)" if t.eager_us else "")
            for t in best.timings[:6]
        )
        line += f"\nPer shape: {per_shape}."
    if not best.timing_meaningful:
        line += (
            "\nTimings come from the CPU Triton interpreter and say nothing about GPU speed: "
            "focus on correctness and on structure that will be fast on the GPU."
        )
    return line


def _attempt_line(attempt: Attempt) -> str:
    line = f"#{attempt.experiment} {attempt.status}"
    if attempt.speedup_vs_eager is not None:
        line += f" {attempt.speedup_vs_eager:.2f}x eager"
    if attempt.speedup_vs_compile is not None:
        line += f" {attempt.speedup_vs_compile:.2f}x compile"
    if attempt.latency_us is not None:
        line += f" {attempt.latency_us:.1f}us"
    line += f": {one_line(attempt.description, 120)}"
    if attempt.tunables:
        line += " [" + " ".join(f"{k}={v}" for k, v in attempt.tunables.items()) + "]"
    if attempt.stage or attempt.reason:
        where = f"stage {attempt.stage}: " if attempt.stage else ""
        line += f" -- {where}{one_line(attempt.reason, 200)}"
    if attempt.hypothesis:  # results.tsv's hypothesis column: it survives a resume
        line += f" (hypothesis: {one_line(attempt.hypothesis, 160)})"
    if attempt.status in FAILED_STATUSES and attempt.stage and attempt.stage != "agent":
        line += f" [full error: {error_file(attempt.experiment)}]"
    return line


def _is_unkept_sweep(attempt: Attempt) -> bool:
    unkept = attempt.status not in ("keep", "baseline")
    return unkept and attempt.description.startswith(TUNER_PREFIX)


def _sweep_line(sweep: list[Attempt]) -> str:
    """Consecutive unkept tuner configurations, as one line: the LLM needs the gist, not each."""
    passed = [a for a in sweep if a.latency_us is not None and a.status == "revert"]
    failed = [a for a in sweep if a.status not in ("revert",)]
    span = f"#{sweep[0].experiment}" + (f"-#{sweep[-1].experiment}" if len(sweep) > 1 else "")
    line = f"{span} tuner sweep: {len(sweep)} configurations not kept"
    if failed:
        line += f" ({len(failed)} failed: {one_line(failed[-1].reason or failed[-1].status, 80)})"
    if passed:
        best = min(passed, key=lambda a: a.latency_us)  # type: ignore[arg-type,return-value]
        config = " ".join(f"{k}={v}" for k, v in best.tunables.items())
        line += f"; fastest {best.latency_us:.1f}us [{config}]"
    return line


def describe_history(history: list[Attempt], limit: int) -> str:
    """Compact history: counts, every kept step (the lineage), and the latest attempts."""
    if not history:
        return "# History on this target\nNothing tried yet beyond the starter."
    counts: dict[str, int] = {}
    for attempt in history:
        counts[attempt.status] = counts.get(attempt.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines = [f"# History on this target ({len(history)} experiments: {summary})"]
    recent = history[-limit:]
    older_keeps = [a for a in history[:-limit] if a.status in ("keep", "baseline")][-10:]
    if older_keeps:
        lines.append("Earlier kept steps:")
        lines += [_attempt_line(a) for a in older_keeps]
    if len(history) > limit:
        lines.append(f"Latest {len(recent)} experiments:")
    sweep: list[Attempt] = []
    for attempt in recent + [None]:  # type: ignore[list-item]
        if attempt is not None and _is_unkept_sweep(attempt):
            sweep.append(attempt)
            continue
        if sweep:
            lines.append(_sweep_line(sweep))
            sweep = []
        if attempt is not None:
            lines.append(_attempt_line(attempt))
    stages = [a.stage for a in recent[-4:] if a.status not in ("keep", "revert", "baseline")]
    if len(stages) >= 3 and len(set(stages)) == 1:
        lines.append(
            f"Note: the last {len(stages)} failures all failed at stage {stages[0]}; "
            "change approach rather than patch the same idea again."
        )
    return "\n".join(lines)


def describe_space(source: str) -> str:
    """The kernel's TUNABLE_SPACE and current values, in one line."""
    from autokernel.kernelfile import KernelFileError, parse_kernel_source

    try:
        info = parse_kernel_source(source)
    except KernelFileError as exc:
        return f"(It does not parse as a kernel file: {exc}.)"
    if not info.space:
        return "It declares no TUNABLE_SPACE yet."
    return f"Its TUNABLE_SPACE: {info.space}; current values: {info.tunables}."


def describe_standing(context: AgentContext, history_limit: int) -> str:
    """Where the target stands: GPU and roofline, the best's figures, history, lessons."""
    parts = [
        "# GPU and roofline",
        context.gpu_summary.strip() or "(no GPU summary)",
        describe_best(context.best),
        "",
        describe_history(context.history, history_limit),
    ]
    if context.lessons.strip():
        parts += ["", "# Lessons on this target (lessons.md; most informative first)",
                  context.lessons.strip()]
    return "\n".join(parts)


def draft_start(context: AgentContext) -> tuple[str, str]:
    """What the draft starts as, with its heading: the current best, or the parent the frontier
    picked instead (autokernel.agents.frontier)."""
    parent = context.parent
    if parent is None or parent.is_best:
        return "The current best kernel.py", context.best_source
    return f"The kernel.py of experiment {parent.experiment} (not the best)", parent.source


def describe_parent(context: AgentContext) -> str:
    """Which parent this experiment edits and how it compares to the best; this round's drafts."""
    lines: list[str] = []
    parent = context.parent
    if parent is not None and not parent.is_best:
        figures = _fmt(parent.latency_us, ".1f", " us")
        if parent.latency_us and parent.best_latency_us:
            figures += (f", {parent.latency_us / parent.best_latency_us:.2f}x the current best's "
                        f"{parent.best_latency_us:.1f} us")
        lines += [
            f"# Your parent: experiment {parent.experiment} ({figures})",
            f"This experiment edits experiment {parent.experiment}'s kernel, not the current best, "
            f"picked {parent.why}. It passed every check but is not faster than the best: make "
            "the change that takes THIS structure past the best. Your kernel is judged against "
            "the current best like any other.",
        ]
    if context.sibling_drafts:
        lines.append("Drafted already this round (not measured yet; propose something else): "
                     + "; ".join(one_line(d, 100) for d in context.sibling_drafts))
    return "\n".join(lines)


def kernel_briefing(context: AgentContext, history_limit: int, note: str,
                    render: Callable[[str], str] = str.rstrip, fence: str = "```python",
                    ) -> list[str]:
    """The kernel to edit (the best, or the frontier's parent) as `render` shows it, its tunable
    space, where the target stands and, for a parent that is not the best, what it is."""
    heading, source = draft_start(context)
    parts = [f"# {heading} ({note})", fence, render(source), "```", describe_space(source), "",
             describe_standing(context, history_limit), ""]
    if describe_parent(context):
        parts += [describe_parent(context), ""]
    return parts


def describe_experiment(context: AgentContext, history_limit: int, plans: str = "") -> str:
    parts = kernel_briefing(context, history_limit, "your draft starts as this file")
    if plans.strip():
        parts += ["# Plans for this experiment (from a planning call; line numbers are those "
                  "of the kernel above)", plans.strip(), ""]
    parts += [
        f"# Experiment {context.experiment}",
        "Propose ONE focused change to kernel.py that you expect to be faster at the benchmarked "
        "shape and still correct at every shape and dtype. Use the history and the lessons: do "
        "not repeat what was reverted or failed unless you fix the reason. Make the edit with the "
        "tools, then end your turn.",
    ]
    if plans.strip():
        parts.append(PLAN_CHOICE)
    parts.append(LESSON_ASK)
    return "\n".join(parts)


def system_blocks(program: str) -> list[dict[str, Any]]:
    """The system prompt: the role, then the playbook, cached (it is the same all night)."""
    return [
        {"type": "text", "text": ROLE},
        {"type": "text", "text": "# The playbook (program.md)\n\n" + program,
         "cache_control": CACHE_CONTROL},
    ]


def opening_message(context: AgentContext, history_limit: int, plans: str = "") -> dict[str, Any]:
    """The experiment's first user turn: the target (cached per target), then this experiment
    (with the planner's plans when it wrote some)."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": describe_target(context), "cache_control": CACHE_CONTROL},
            {"type": "text", "text": describe_experiment(context, history_limit, plans)},
        ],
    }


def extract_lesson(final_text: str) -> str:
    """The 'Lesson: ...' line of Claude's closing summary (the last one), or ''."""
    found = LESSON_LINE.findall(final_text or "")
    return one_line(found[-1], 300) if found else ""


PLAN_CHOICE = (
    "Implement ONE of the plans above (or a clearly better idea if the plans are wrong); start "
    "the hypothesis you give edit_kernel or write_kernel with the plan's name, e.g. "
    "'plan 2: ...', or 'own plan: ...'."
)
LESSON_ASK = (
    "In your closing summary you may add one line 'Lesson: ...': what the history, the lessons or "
    "the code taught you that later experiments on this target should know. It is kept in the "
    "target's lessons.md."
)
LESSON_LINE = re.compile(r"^[ \t*_>-]*lesson[*_]*\s*:[*_]*\s*(\S.*)$", re.IGNORECASE | re.MULTILINE)

NO_KERNEL_NUDGE = (
    "You have not changed kernel.py. Make this experiment's change with edit_kernel or "
    "write_kernel (with a description and a hypothesis), then end your turn."
)
CUT_OFF_NUDGE = (
    "Your reply was cut off at the output-token limit. Use edit_kernel for smaller, focused "
    "edits instead of rewriting the whole file."
)
