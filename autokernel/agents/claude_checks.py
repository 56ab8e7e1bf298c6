"""The Claude agent's repair tools: compile and test the draft inside the turn, before it counts.

Without them a draft that does not compile, or computes a wrong answer, is found only by the
harness after Claude's turn: a failed experiment, and one of the reverts in a row that end a
target. With them Claude checks its draft and fixes it in the same conversation:

- `compile_kernel`: the ahead-of-time check (`autokernel.aot`): the draft's launches recorded on
  CPU inputs (not executed), each compiled by Triton for Hopper (sm_90) without a GPU; per launch
  the registers, spilled bytes and shared memory, or the compiler's whole message.
- `test_kernel`: the harness's correctness and anti-cheat stages (`run_bench(...,
  correctness_only=True)`: its sandboxed worker and candidate processes, its quick case plan, on
  the CPU interpreter its small CPU shapes), never timed; the whole error, traceback included.

Both run on a copy of the draft in a scratch directory (never kernel.py), in other processes (the
AOT check in a `python -m autokernel.aot` child, the test in the harness's worker), and only after
the draft passes the static check (the harness's anti-cheat scan), so a draft that crashes or
hangs costs a tool result, not the agent. Each tool may be used MAX_USES times per experiment
(3 of each, counted separately: a draft typically needs a compile fix and then a correctness
fix); checking an unchanged draft again is answered from memory and not counted. The calls and
their seconds go on the Proposal and into its description; the drafts that failed are kept for
`autokernel.loop.attempts` to save beside the experiment.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.text import bounded_text, count_of, format_duration

if TYPE_CHECKING:
    from autokernel.agents.base import AgentContext, Proposal
    from autokernel.aot import AotResult
    from autokernel.harness.result import BenchResult

COMPILE_TOOL = "compile_kernel"
TEST_TOOL = "test_kernel"
CHECK_TOOLS = (COMPILE_TOOL, TEST_TOOL)
MAX_USES = 3  # of each tool, per experiment
RESULT_CHARS = 6000  # one tool result's error text
MAX_COMPILE_SHAPES = 3
# Compile-check inputs are built on the CPU (never run): a shape past this many elements is left
# to the GPU harness rather than allocated here.
MAX_COMPILE_ELEMENTS = 1 << 28
# On the CPU interpreter only target shapes this small join the harness's own small CPU shapes.
MAX_CPU_TEST_ELEMENTS = 1 << 16
COMPILE_TIMEOUT_S = 600
TEST_TIMEOUT_S = 600.0
DRAFT_FILE = "kernel.py"

CHECK_TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": COMPILE_TOOL,
        "description": (
            "Compile the kernel.py draft's Triton kernels for Hopper (sm_90) without running "
            "them: returns each launch's registers, spills (local memory) and shared memory, or "
            "the compiler's full error. Run it after a change, before ending your turn. "
            f"At most {MAX_USES} uses per experiment (an unchanged draft is not re-checked)."
        ),
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": TEST_TOOL,
        "description": (
            "Run the harness's correctness and anti-cheat stages on the kernel.py draft (small "
            "shapes, every stage, not timed): PASS, or the failing stage with the full error and "
            "traceback. A draft that fails here would fail the experiment: fix it and test "
            f"again before ending your turn. At most {MAX_USES} uses per experiment."
        ),
        "input_schema": {"type": "object", "properties": {}},
    },
]


@dataclass(frozen=True)
class CheckTarget:
    """What the checks need to know of the experiment's target."""

    kernel_type: str
    device: str  # "cuda" or "cpu" (the Triton interpreter)
    dtype: str  # the dtype the model runs, e.g. "fp16"
    shapes: tuple[tuple[int, ...], ...]  # the benchmarked shape first, then the profiled ones
    params: dict[str, Any] = field(default_factory=dict)
    workspace: Path | None = None

    @classmethod
    def from_context(cls, context: AgentContext) -> CheckTarget:
        target = context.target
        shapes: list[tuple[int, ...]] = []
        for shape in [target.bench_shape, *target.shapes]:
            if shape and tuple(shape) not in shapes:
                shapes.append(tuple(int(d) for d in shape))
        return cls(kernel_type=target.kernel_type, device=context.device, dtype=target.dtype,
                   shapes=tuple(shapes), params=dict(target.params or {}),
                   workspace=Path(context.workspace) if context.workspace else None)

    @property
    def cache_dir(self) -> Path | None:
        """The loop's harness cache, so a draft's compiled kernels are reused when it is judged."""
        return self.workspace / ".cache" / "harness" if self.workspace is not None else None


@dataclass
class FailedDraft:
    """A draft a check failed, with that check's full answer (saved under attempts/)."""

    tool: str
    source: str
    error: str


CompileCheck = Callable[[Path, CheckTarget], "list[AotResult]"]


@dataclass
class CheckRunners:
    """How the checks run; None: the real ones (the AOT command in a child process, the
    harness's run_bench). Tests pass fakes, or max_uses=0 to switch the tools off."""

    max_uses: int = MAX_USES
    compile: CompileCheck | None = None
    bench: Callable[..., BenchResult] | None = None


def compile_in_child(path: Path, target: CheckTarget) -> list[AotResult]:
    """`python -m autokernel.aot check` on the draft, in a child process (its module-level code
    and kernel_fn run there, not here), at the target's dtype and up to MAX_COMPILE_SHAPES of its
    shapes. A child that dies or answers nothing is one failed result."""
    from autokernel.aot import AotResult

    command = [sys.executable, "-m", "autokernel.aot", "check", str(path), "--no-execute",
               "--json", "--dtype", target.dtype]
    for shape in _compile_shapes(target):
        command += ["--shape", "x".join(map(str, shape))]
    # The record phase interprets; the compile phase (its own child) compiles for sm_90 with no
    # device. Neither needs the GPU the harness uses.
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    try:
        done = subprocess.run(command, env=env, cwd=path.parent, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [AotResult("kernel_fn", ok=False, error=f"the compile check took more than "
                                                      f"{COMPILE_TIMEOUT_S} s")]
    try:
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        known = {f.name for f in fields(AotResult)}
        return [AotResult(**{k: v for k, v in row.items() if k in known}) for row in rows]
    except (ValueError, IndexError, TypeError):
        tail = (done.stderr or done.stdout).strip()
        return [AotResult("kernel_fn", ok=False, error=f"the compile check died (exit "
                          f"{done.returncode})", detail=bounded_text(tail, RESULT_CHARS))]


def _compile_shapes(target: CheckTarget) -> list[tuple[int, ...]]:
    from autokernel.ops import get_spec

    shapes = [s for s in target.shapes if math.prod(s) <= MAX_COMPILE_ELEMENTS]
    return (shapes or [tuple(get_spec(target.kernel_type).smoke_shape)])[:MAX_COMPILE_SHAPES]


def _test_shapes(target: CheckTarget) -> tuple[list[list[int]] | None, list[list[int]]]:
    """(timed shapes, model shapes) for run_bench: on a GPU the loop's own; on the interpreter the
    harness's small CPU shapes, joined by the target's shapes that are small too."""
    shapes = [list(s) for s in target.shapes]
    if target.device != "cpu":
        return shapes[:1] or None, shapes
    small = [s for s in shapes if math.prod(s) <= MAX_CPU_TEST_ELEMENTS]
    return small[:1] or None, small


class DraftChecks:
    """One experiment's compile_kernel and test_kernel: their limits, answers, cost and failures."""

    def __init__(self, target: CheckTarget, runners: CheckRunners | None = None) -> None:
        self.target = target
        self.runners = runners or CheckRunners()
        self.uses: dict[str, int] = {}
        self.seconds = 0.0
        self.failed: list[FailedDraft] = []
        self._answers: dict[tuple[str, str], tuple[str, bool]] = {}  # (tool, draft) -> answer

    @property
    def calls(self) -> int:
        return sum(self.uses.values())

    def run(self, tool: str, source: str) -> tuple[str, bool]:
        """The tool_result text of `tool` on `source`, and whether it is a tool error."""
        from autokernel.agents.claude_tools import check_kernel_source

        if tool not in CHECK_TOOLS:
            return f"unknown check {tool!r}", True
        if self.runners.max_uses <= 0:
            return f"{tool} is not available in this run.", True
        if (tool, source) in self._answers:
            text = self._answers[tool, source][0]
            return f"(the draft has not changed since the last {tool}; same answer)\n{text}", False
        problems = check_kernel_source(source, self.target.kernel_type)
        if problems:  # also keeps a draft the anti-cheat scan refuses from ever being executed
            listed = "\n".join(f"- {p}" for p in problems)
            return f"Not run: the draft fails the static check first:\n{listed}", True
        used = self.uses.get(tool, 0)
        if used >= self.runners.max_uses:
            return (f"{tool} limit reached: {self.runners.max_uses} uses per experiment. End "
                    "your turn to submit the draft, or fix it from the errors you have."), True
        self.uses[tool] = used + 1
        started = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="autokernel-draft-") as scratch:
                path = Path(scratch) / DRAFT_FILE
                path.write_text(source, encoding="utf-8")
                text, failed = (self._compile(path) if tool == COMPILE_TOOL
                                else self._test(path))
        finally:
            self.seconds += time.perf_counter() - started
        text += f"\n[{tool} use {used + 1} of {self.runners.max_uses}]"
        self._answers[tool, source] = (text, failed)
        if failed:
            self.failed.append(FailedDraft(tool, source, text))
        return text, False

    def _compile(self, path: Path) -> tuple[str, bool]:
        from autokernel.aot import format_result

        check = self.runners.compile or compile_in_child
        results = check(path, self.target)
        failed = not results or not all(r.ok for r in results)
        head = (f"compile_kernel: {'FAILED' if failed else 'OK'} for Hopper (sm_90), "
                f"{self.target.dtype}, {count_of(len(results), 'launch specialisation')}.")
        lines = [head, *(format_result(r) for r in results)]
        shown: set[str] = set()
        for result in results:
            if result.detail and result.detail not in shown:
                shown.add(result.detail)
                lines.append(f"\nFull error of {result.kernel} [{result.context}]:\n"
                             f"{result.detail}")
        if not failed:
            lines.append("regs: registers per thread (65536 per SM); local > 0: register "
                         "spills; shared: bytes of shared memory per block.")
        return bounded_text("\n".join(lines), RESULT_CHARS), failed

    def _test(self, path: Path) -> tuple[str, bool]:
        bench = self.runners.bench
        if bench is None:
            from autokernel.harness.runner import run_bench as bench
        target = self.target
        shapes, model_shapes = _test_shapes(target)
        cache = target.cache_dir
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        result = bench(path, device=target.device, shapes=shapes, dtypes=[target.dtype],
                       correctness_dtypes=[target.dtype], model_shapes=model_shapes,
                       params=dict(target.params), timeout_s=TEST_TIMEOUT_S, cache_dir=cache,
                       quick=True, correctness_only=True)
        return describe_test(result), not result.passed


def describe_test(result: BenchResult) -> str:
    """test_kernel's answer: PASS with what was checked, or the failure with its whole text."""
    stages = ", ".join(f"{name} {state}" for name, state in result.stages.items())
    cases = sum(result.stage_cases.values())
    where = "the CPU Triton interpreter" if result.device == "cpu" else result.device
    seconds = f"{result.harness_seconds:.1f} s" if result.harness_seconds is not None else ""
    if result.passed:
        return (f"test_kernel: PASS on {where} ({cases} cases; {stages}; {seconds}). "
                "Not timed: speed is measured after your turn.")
    lines = [f"test_kernel: {result.status.value} at stage {result.stage}"
             + (f" [{result.rule}]" if result.rule else ""),
             f"stages: {stages}",
             f"reason: {result.reason}"]
    if result.detail:
        lines.append("full error:\n" + result.detail)
    return bounded_text("\n".join(lines), RESULT_CHARS)


def account_checks(proposal: Proposal, checks: DraftChecks | None,
                   experiment: int, workspace: str | None) -> None:
    """Put the checks' calls and seconds on the proposal (and a note in its description), and
    save the drafts they failed under the workspace's attempts/."""
    if checks is None or not checks.calls:
        return
    proposal.check_calls = checks.calls
    proposal.check_seconds = round(checks.seconds, 3)
    used = ", ".join(f"{tool} x{n}" for tool, n in sorted(checks.uses.items()))
    proposal.description += f" [checked: {used}, {format_duration(checks.seconds)}]"
    if workspace is not None and checks.failed:
        from autokernel.loop.attempts import save_failed_drafts

        save_failed_drafts(Path(workspace), experiment,
                           [(d.tool, d.source, d.error) for d in checks.failed])
