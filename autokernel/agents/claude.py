"""The Claude agent: each experiment is one short tool-use conversation with the Messages API.

Per experiment the agent sends the playbook (program.md), the target and its reference, the current
best kernel.py, the GPU and where the best sits on its roofline, and a compact history of what was
tried; Claude edits an in-memory kernel.py with the tools of `claude_tools` and ends its turn. The
edited file is the proposal; the loop benchmarks it and keeps or reverts it.

What makes it safe to leave running overnight:
- The SDK retries 408/409/429/5xx/529 with exponential backoff (honouring retry-after); each request
  has a timeout. A reply without a kernel, a malformed one, or an API failure after the retries is
  a failed experiment (`Proposal.error`), never a crash. Repeated failures, an unusable key or an
  unknown model end the run cleanly through `AgentStop`.
- Context stays bounded: history is compacted to one line per attempt (at most `history_limit`),
  tool results are capped, and the tool loop has at most `max_turns` requests per experiment.
- The stable prefix (tools, playbook, then target + reference) carries `cache_control`, so an
  overnight run pays full price for it about once per target.
- Every request's usage (input, output, cache read and write tokens) is priced from `PRICES`;
  `--max-cost` and `--max-llm-calls` are checked before each request. They cap the whole run: the
  spend so far is kept in the workspace (`.cache/claude_usage.json`, which reverts never touch),
  so a resumed run goes on counting from there.

`anthropic` is imported only inside this module's functions: the GPU machines may not have it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel.agents import AgentUnavailable
from autokernel.agents.base import Agent, AgentContext, AgentStop, Attempt, Proposal
from autokernel.agents.claude_tools import (
    KERNEL_FILE,
    TOOL_SCHEMAS,
    KernelDraft,
    ToolBox,
    WorkspaceReader,
    one_line,
)
from autokernel.harness.result import BenchResult

TUNER_PREFIX = "tuner:"  # the tuner's descriptions start so (autokernel.agents.tuner)
DEFAULT_MODEL = "claude-sonnet-5-5"
MODEL_ENV = "AUTOKERNEL_CLAUDE_MODEL"
EFFORT_ENV = "AUTOKERNEL_CLAUDE_EFFORT"
EFFORTS = ("low", "medium", "high", "xhigh", "max")
PROGRAM_FILE = "program.md"
LEDGER_FILE = ".cache/claude_usage.json"  # the workspace's .cache/ survives reverts and resume
PACKAGED_PROGRAM = Path(__file__).resolve().parent / PROGRAM_FILE


class ClaudeConfigError(AgentUnavailable):
    """The agent cannot be set up as asked (no credentials, a cost cap without a known price)."""


# ---------------------------------------------------------------------------------------------
# Prices
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Long prompts (input + cache reads + writes above the threshold)
    are billed at `long_prompt` rates on every token of that request, output included."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    long_prompt_threshold: int | None = None
    long_prompt: Price | None = None


PRICES_SOURCE = (
    "Anthropic's pricing page and model overview pages (platform.claude.com/docs/en/about-claude/"
    "pricing, .../models/<model>/overview), list prices read on 2026-11-21"
)
_OPUS_4X = Price(5.0, 25.0, 6.25, 10.0, 0.50)
_SONNET_4X = Price(3.0, 15.0, 3.75, 6.0, 0.30)
PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(8.0, 40.0, 10.0, 16.0, 0.20),
    "claude-fable-5-1": Price(10.0, 50.0, 12.50, 20.0, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.50, 20.0, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.50, 20.0, 1.00),
    "claude-mythos-5": Price(10.0, 50.0, 12.50, 20.0, 1.00),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 8.0, 0.20),
    "claude-opus-5": _OPUS_4X,
    "claude-opus-4-8": _OPUS_4X,
    "claude-opus-4-7": _OPUS_4X,
    "claude-opus-4-6": _OPUS_4X,
    "claude-opus-4-5": _OPUS_4X,
    # Sonnet 5.5 cache reads went from $0.20 to $0.10 on 2026-10-07.
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.50, 4.0, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.50, 4.0, 0.20),
    "claude-sonnet-4-6": _SONNET_4X,
    "claude-sonnet-4-5": _SONNET_4X,
    "claude-haiku-5-5": Price(
        0.10, 0.50, 0.125, 0.20, 0.01,
        long_prompt_threshold=100_000,
        long_prompt=Price(0.50, 2.50, 0.625, 1.00, 0.05),
    ),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 2.0, 0.10),
}


def model_family(model: str) -> str:
    """'us.anthropic.claude-opus-4-5-20251101-v1:0' -> 'claude-opus-4-5' (provider and date off)."""
    name = model.strip().lower()
    name = name[name.find("claude-"):] if "claude-" in name else name
    name = re.sub(r"\[[^\]]*\]$", "", name)  # "[1m]" context-window suffixes
    name = re.sub(r"-v\d+(:\d+)?$", "", name)  # Bedrock "-v1:0"
    name = re.sub(r"[@-]\d{8}$", "", name)  # dated snapshots, Vertex "@20251101"
    return name


def price_for(model: str) -> Price | None:
    return PRICES.get(model_family(model))


@dataclass
class Spend:
    """Tokens and dollars of some LLM calls. `cost_usd` covers the priced calls only."""

    input_tokens: int = 0  # uncached input
    output_tokens: int = 0  # thinking included
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def add(self, other: Spend) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def prompt_tokens(self) -> int:
        """Every input token processed: uncached, read from the cache, and written to it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spend:
        spend = cls()
        for name in cls.__dataclass_fields__:
            value = data.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(spend, name, type(getattr(spend, name))(value))
        return spend

    @property
    def cost_or_none(self) -> float | None:
        """The cost when every call was priced, else None (unknown)."""
        return None if self.unpriced_calls else self.cost_usd

    def describe(self) -> str:
        cost = f"${self.cost_usd:.2f}" + (
            f" + {self.unpriced_calls} unpriced calls" if self.unpriced_calls else ""
        )
        return (
            f"{self.calls} LLM calls, {self.input_tokens:,} input + {self.cache_read_tokens:,} "
            f"cache-read + {self.cache_write_tokens:,} cache-write + {self.output_tokens:,} output "
            f"tokens, {cost}"
        )


def usage_spend(model: str, usage: Any, fallback_model: str | None = None) -> Spend:
    """Tokens and cost of one Messages API response's `usage`.

    Priced at the model that served the request (a gateway or a safety reroute may serve another
    than the one asked for), falling back to the requested model's price when that one is unknown.
    """
    def count(name: str) -> int:
        value = getattr(usage, name, None) if usage is not None else None
        return int(value) if isinstance(value, (int, float)) else 0

    spend = Spend(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
        calls=1,
    )
    price = price_for(model) or (price_for(fallback_model) if fallback_model else None)
    if price is None:
        spend.unpriced_calls = 1
        return spend
    prompt = spend.input_tokens + spend.cache_read_tokens + spend.cache_write_tokens
    if price.long_prompt and price.long_prompt_threshold and prompt > price.long_prompt_threshold:
        price = price.long_prompt
    breakdown = getattr(usage, "cache_creation", None)
    write_1h = int(getattr(breakdown, "ephemeral_1h_input_tokens", 0) or 0) if breakdown else 0
    write_5m = max(spend.cache_write_tokens - write_1h, 0)
    spend.cost_usd = (
        spend.input_tokens * price.input
        + spend.output_tokens * price.output
        + spend.cache_read_tokens * price.cache_read
        + write_5m * price.cache_write_5m
        + write_1h * price.cache_write_1h
    ) / 1e6
    return spend


# ---------------------------------------------------------------------------------------------
# The prompt
# ---------------------------------------------------------------------------------------------

ROLE = """\
You are the optimization agent of autokernel, an overnight GPU-kernel optimizer. Each conversation \
is ONE experiment on ONE target: make kernel.py (Triton) faster at the target's profiled shapes \
while keeping it correct everywhere.

How an experiment works:
1. Read what you need (read_file / list_files; kernel.py is your draft).
2. Change kernel.py with edit_kernel (focused edits) or write_kernel (whole file), giving a \
one-line description and the hypothesis the change tests. check_kernel runs a static check.
3. End your turn with a short summary. You cannot run code: after your turn the harness checks \
correctness (many shapes, dtypes, adversarial inputs, anti-cheat scans) and benchmarks the kernel \
against PyTorch eager and torch.compile. The loop keeps it as a git commit only if it passes and \
beats the current best by more than the measured noise; otherwise it is reverted.

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


def _attempt_line(attempt: Attempt, hypothesis: str | None) -> str:
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
    if hypothesis:
        line += f" (hypothesis: {one_line(hypothesis, 160)})"
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


def describe_history(
    history: list[Attempt], hypotheses: dict[int, str], limit: int
) -> str:
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
        lines += [_attempt_line(a, hypotheses.get(a.experiment)) for a in older_keeps]
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
            lines.append(_attempt_line(attempt, hypotheses.get(attempt.experiment)))
    stages = [a.stage for a in recent[-4:] if a.status not in ("keep", "revert", "baseline")]
    if len(stages) >= 3 and len(set(stages)) == 1:
        lines.append(
            f"Note: the last {len(stages)} failures all failed at stage {stages[0]}; "
            "change approach rather than patch the same idea again."
        )
    return "\n".join(lines)


def describe_experiment(
    context: AgentContext, hypotheses: dict[int, str], history_limit: int
) -> str:
    from autokernel.kernelfile import KernelFileError, parse_kernel_source

    try:
        info = parse_kernel_source(context.best_source)
        space = (
            f"Its TUNABLE_SPACE: {info.space}; current values: {info.tunables}."
            if info.space
            else "It declares no TUNABLE_SPACE yet."
        )
    except KernelFileError as exc:
        space = f"(It does not parse as a kernel file: {exc}.)"
    return "\n".join([
        "# The current best kernel.py (your draft starts as this file)",
        "```python",
        context.best_source.rstrip(),
        "```",
        space,
        "",
        "# GPU and roofline",
        context.gpu_summary.strip() or "(no GPU summary)",
        describe_best(context.best),
        "",
        describe_history(context.history, hypotheses, history_limit),
        "",
        f"# Experiment {context.experiment}",
        "Propose ONE focused change to kernel.py that you expect to be faster at the benchmarked "
        "shape and still correct at every shape and dtype. Use the history: do not repeat what "
        "was reverted or failed unless you fix the reason. Make the edit with the tools, then end "
        "your turn.",
    ])


# ---------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------

_CACHE = {"type": "ephemeral"}


@dataclass
class _Outcome:
    """How one experiment's conversation ended."""

    error: str = ""
    transient: bool = False  # an API failure worth waiting before the next try
    fatal: str = ""  # stop the run after this experiment
    final_text: str = ""


@dataclass
class _TargetMemory:
    key: tuple[Any, ...]
    hypotheses: dict[int, str] = field(default_factory=dict)


class ClaudeAgent:
    """Anthropic Messages API + tools; one conversation per experiment."""

    name = "claude"

    def __init__(
        self,
        *,
        model: str | None = None,
        max_cost: float | None = None,
        max_llm_calls: int | None = None,
        max_turns: int = 8,
        max_tokens: int = 16_000,
        timeout: float = 600.0,
        max_retries: int = 5,
        max_consecutive_failures: int = 4,
        failure_backoff_s: float = 30.0,
        history_limit: int = 40,
        effort: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise ClaudeConfigError(
                "the claude agent needs the anthropic package (pip install anthropic); "
                "--agent tuner works without it"
            ) from exc

        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        if max_cost is not None and max_cost <= 0:
            raise ClaudeConfigError(f"--max-cost must be positive; got {max_cost}")
        if max_llm_calls is not None and max_llm_calls <= 0:
            raise ClaudeConfigError(f"--max-llm-calls must be positive; got {max_llm_calls}")
        if max_cost is not None and price_for(self.model) is None:
            raise ClaudeConfigError(
                f"no price is known for model {self.model!r}, so --max-cost cannot be enforced; "
                f"use --max-llm-calls, or a model of: {', '.join(PRICES)}"
            )
        self.effort = effort or os.environ.get(EFFORT_ENV) or None
        if self.effort is not None and self.effort not in EFFORTS:
            raise ClaudeConfigError(
                f"effort must be one of {', '.join(EFFORTS)}; got {self.effort!r}"
            )
        self.max_cost = max_cost
        self.max_llm_calls = max_llm_calls
        self.max_turns = max(1, max_turns)
        self.max_tokens = max_tokens
        self.max_consecutive_failures = max(1, max_consecutive_failures)
        self.failure_backoff_s = failure_backoff_s
        self.history_limit = history_limit
        self._sleep = sleep

        # A long read timeout for a long reply, a short connect timeout: an unreachable host
        # must not hold the night for max_retries x 10 minutes.
        timeouts = anthropic.Timeout(timeout, connect=min(timeout, 15.0))
        options: dict[str, Any] = {"max_retries": max_retries, "timeout": timeouts}
        if api_key is not None:
            options["api_key"] = api_key
        if base_url is not None:  # otherwise the SDK reads ANTHROPIC_BASE_URL itself
            options["base_url"] = base_url
        if http_client is not None:
            options["http_client"] = http_client
        try:
            self._client = anthropic.Anthropic(**options)
        except (anthropic.AnthropicError, ValueError, TypeError) as exc:
            raise ClaudeConfigError(
                f"cannot set up the Anthropic client ({one_line(str(exc), 200)}); "
                "set ANTHROPIC_API_KEY, or use --agent tuner, which works offline"
            ) from exc
        client = self._client
        if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
            raise ClaudeConfigError(
                "the claude agent needs Anthropic credentials: set ANTHROPIC_API_KEY "
                "(or use --agent tuner, which works offline)"
            )

        self.total = Spend()
        self._ledger: Path | None = None
        self._largest_call_usd = 0.0
        self._consecutive_failures = 0
        self._transient_failures = 0
        self._stop_reason = ""
        self._memory: _TargetMemory | None = None
        self._pending: tuple[int, str] | None = None  # (experiment, hypothesis) awaiting observe

    # -- the run's ledger -----------------------------------------------------------------

    def _open_ledger(self, workspace: str | None) -> None:
        """Count what earlier sessions of this run spent, once, and record every call from now."""
        if workspace is None or self._ledger is not None:
            return
        self._ledger = Path(workspace) / LEDGER_FILE
        try:
            earlier = Spend.from_dict(json.loads(self._ledger.read_text()))
        except (OSError, ValueError, AttributeError):
            return  # no earlier session (or an unreadable ledger: start counting afresh)
        self.total.add(earlier)
        if earlier.calls:
            self._largest_call_usd = max(self._largest_call_usd, earlier.cost_usd / earlier.calls)

    def _save_ledger(self) -> None:
        if self._ledger is None:
            return
        try:
            self._ledger.parent.mkdir(parents=True, exist_ok=True)
            scratch = self._ledger.with_suffix(".tmp")
            scratch.write_text(json.dumps(self.total.to_dict(), indent=1) + "\n")
            os.replace(scratch, self._ledger)
        except OSError:
            pass  # the caps still hold for this session; only a resume would forget the spend

    # -- budget ---------------------------------------------------------------------------

    def budget_stop_reason(self, prompt_chars: int = 0) -> str:
        """Why the next request must not be made (a cap would be crossed), or ''."""
        spent = f"{self.total.describe()}"
        if self.max_llm_calls is not None and self.total.calls >= self.max_llm_calls:
            return f"--max-llm-calls {self.max_llm_calls} reached ({spent})"
        if self.max_cost is not None:
            projected = self._largest_call_usd or self._estimate_first_call(prompt_chars)
            if self.total.cost_usd + projected > self.max_cost:
                return (
                    f"--max-cost ${self.max_cost:.2f} reached: ${self.total.cost_usd:.4f} spent "
                    f"and the next call may cost ~${projected:.4f} ({spent})"
                )
        return ""

    def _estimate_first_call(self, prompt_chars: int) -> float:
        """Before any request has been priced: the prompt written to the cache, ~4k tokens out."""
        price = price_for(self.model)
        if price is None:
            return 0.0
        return (prompt_chars / 3.5 * price.cache_write_5m + 4_000 * price.output) / 1e6

    # -- the conversation -------------------------------------------------------------------

    def _system(self, program: str) -> list[dict[str, Any]]:
        return [
            {"type": "text", "text": ROLE},
            {"type": "text", "text": "# The playbook (program.md)\n\n" + program,
             "cache_control": _CACHE},
        ]

    @staticmethod
    def _with_tail_cache(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A copy whose last block carries the moving cache breakpoint (at most 4 are allowed)."""
        out = [dict(m) for m in messages]
        last = out[-1]
        content = last["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        content = [dict(b) if isinstance(b, dict) else b for b in content]
        if content and isinstance(content[-1], dict) and content[-1].get("type") in (
            "text", "tool_result"
        ):
            content[-1]["cache_control"] = _CACHE
        last["content"] = content
        return out

    def _request(self, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Any:
        extra: dict[str, Any] = {}
        if self.effort:
            extra["output_config"] = {"effort": self.effort}
        return self._client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            system=system,
            tools=TOOL_SCHEMAS,
            messages=self._with_tail_cache(messages),
            **extra,
        )

    def _classify_api_error(self, exc: Exception) -> _Outcome:
        import anthropic

        if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
            return _Outcome(
                error=f"Claude API refused the credentials ({exc.status_code})",
                fatal="the Claude API refused the credentials: check ANTHROPIC_API_KEY "
                f"(HTTP {exc.status_code}: {_api_message(exc)})",
            )
        if isinstance(exc, anthropic.NotFoundError):
            return _Outcome(
                error=f"model {self.model} not found",
                fatal=f"the Claude API does not know model {self.model!r} (HTTP 404: "
                f"{_api_message(exc)}); choose another with --model or {MODEL_ENV}",
            )
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 402:
            return _Outcome(
                error="Claude API: payment required",
                fatal=f"the Claude API answered 402 (payment required): {_api_message(exc)}",
            )
        if isinstance(exc, anthropic.APITimeoutError):
            return _Outcome(error="Claude API: request timed out after retries", transient=True)
        if isinstance(exc, anthropic.APIConnectionError):
            return _Outcome(error=f"Claude API unreachable after retries: {exc}", transient=True)
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            kind = {429: "rate limited", 529: "overloaded"}.get(status, f"HTTP {status}")
            return _Outcome(
                error=f"Claude API {kind} ({status}) after retries: {_api_message(exc)}",
                transient=status in (408, 409, 429) or status >= 500,
            )
        return _Outcome(error=f"Claude API error: {type(exc).__name__}: {exc}")

    def _converse(
        self, context: AgentContext, draft: KernelDraft, reader: WorkspaceReader, spend: Spend
    ) -> _Outcome:
        import anthropic

        program = load_program(context.workspace)
        memory = self._memory.hypotheses if self._memory else {}
        system = self._system(program)
        messages: list[dict[str, Any]] = [{
            "role": "user",
            "content": [
                {"type": "text", "text": describe_target(context), "cache_control": _CACHE},
                {"type": "text",
                 "text": describe_experiment(context, memory, self.history_limit)},
            ],
        }]
        toolbox = ToolBox(draft=draft, reader=reader)
        final_text = ""
        for turn in range(self.max_turns):
            prompt_chars = len(program) + sum(len(str(m["content"])) for m in messages)
            stop = self.budget_stop_reason(prompt_chars)
            if stop:
                self._stop_reason = stop
                return _Outcome(error=f"stopped before an LLM call: {stop}", final_text=final_text)
            try:
                response = self._request(system, messages)
            except anthropic.AnthropicError as exc:
                return self._classify_api_error(exc)
            except ValueError as exc:  # a body that is not JSON
                return _Outcome(error=f"malformed API reply: {one_line(str(exc), 160)}")
            call = usage_spend(
                str(getattr(response, "model", "") or self.model), getattr(response, "usage", None),
                fallback_model=self.model,
            )
            spend.add(call)
            self.total.add(call)
            self._save_ledger()
            self._largest_call_usd = max(self._largest_call_usd, call.cost_usd)

            blocks = list(getattr(response, "content", None) or [])
            texts = [b.text for b in blocks if getattr(b, "type", None) == "text" and b.text]
            if texts:
                final_text = texts[-1]
            tool_uses = [b for b in blocks if getattr(b, "type", None) == "tool_use"]
            stop_reason = getattr(response, "stop_reason", None)
            if stop_reason in ("refusal", "model_context_window_exceeded"):
                return _Outcome(error=f"Claude stopped: {stop_reason}", final_text=final_text)
            messages.append({"role": "assistant", "content": [_block_param(b) for b in blocks]})
            if stop_reason == "pause_turn":
                continue  # the API asks for the same conversation to be sent back as it is
            if tool_uses:
                results: list[dict[str, Any]] = []
                for use in tool_uses:
                    text, is_error = toolbox.run(str(use.name), getattr(use, "input", None))
                    results.append({"type": "tool_result", "tool_use_id": use.id,
                                    "content": text, "is_error": is_error})
                if stop_reason == "max_tokens":
                    results.append({"type": "text", "text": _CUT_OFF})
                messages.append({"role": "user", "content": results})
                continue
            if not blocks:
                nudge = "Your reply was empty. " + _NO_KERNEL
            elif stop_reason == "max_tokens":
                nudge = _CUT_OFF
            elif not draft.changed:
                nudge = _NO_KERNEL
            elif draft.problems():
                listed = "\n".join(f"- {p}" for p in draft.problems())
                nudge = (f"kernel.py fails the static check:\n{listed}\n"
                         "Fix it with edit_kernel, then end your turn.")
            else:
                return _Outcome(final_text=final_text)
            if turn + 1 < self.max_turns:
                messages.append({"role": "user", "content": [{"type": "text", "text": nudge}]})
        return _Outcome(final_text=final_text)

    # -- Agent protocol ---------------------------------------------------------------------

    def propose(self, context: AgentContext) -> Proposal | None:
        if self._stop_reason:
            raise AgentStop(self._stop_reason)
        self._open_ledger(context.workspace)
        stop = self.budget_stop_reason()
        if stop:
            raise AgentStop(stop)
        key = (context.target.rank, context.target.kernel_type)
        if self._memory is None or self._memory.key != key:
            self._memory = _TargetMemory(key=key)
        if self._transient_failures:
            # An overloaded or unreachable API: give it time before asking again.
            self._sleep(min(self.failure_backoff_s * 2 ** (self._transient_failures - 1), 600.0))

        draft = KernelDraft(original=context.best_source, kernel_type=context.target.kernel_type)
        overlay = {KERNEL_FILE: draft.source}
        if context.workspace is None:
            overlay.update({"reference.py": context.reference_source,
                            "program.md": load_program(None)})
        reader = WorkspaceReader(context.workspace, overlay)
        spend = Spend()
        try:
            outcome = self._converse(context, draft, reader, spend)
        except Exception as exc:  # a reply this code did not foresee must not end the night
            outcome = _Outcome(error=f"unexpected reply: {type(exc).__name__}: {exc}")

        error = outcome.error
        if not error and not draft.changed:
            error = "no kernel: " + (
                f"Claude answered with text only ({one_line(outcome.final_text, 120)})"
                if outcome.final_text else "Claude made no edit"
            )
        if not error and draft.problems():
            error = "kernel.py fails the static check: " + "; ".join(draft.problems())
        if error and draft.changed and not draft.problems() and not outcome.fatal:
            error = ""  # a valid kernel was written before the stop: it is paid for, try it

        proposal = Proposal(
            source=draft.source,
            description=draft.description
            or one_line(outcome.final_text or "claude edit (no description given)"),
            hypothesis=draft.hypothesis or one_line(outcome.final_text, 400),
            input_tokens=spend.prompt_tokens,
            output_tokens=spend.output_tokens,
            cost_usd=spend.cost_or_none,
            cache_read_tokens=spend.cache_read_tokens,
            cache_write_tokens=spend.cache_write_tokens,
            llm_calls=spend.calls,
            agent=self.name,
        )
        if not error:
            self._consecutive_failures = 0
            self._transient_failures = 0
            self._pending = (context.experiment, proposal.hypothesis)
            try:
                from autokernel.kernelfile import parse_kernel_source

                proposal.tunables = dict(parse_kernel_source(draft.source).tunables)
            except ValueError:
                pass
            return proposal

        self._consecutive_failures += 1
        self._transient_failures = self._transient_failures + 1 if outcome.transient else 0
        streak = self._consecutive_failures
        if outcome.fatal:
            self._stop_reason = outcome.fatal
        elif streak >= self.max_consecutive_failures and not self._stop_reason:
            if self._transient_failures == streak:
                self._stop_reason = (
                    f"the Claude API failed in {streak} experiments in a row, each after the "
                    f"SDK's retries (last: {error}); stopping - `autokernel resume` continues "
                    "the run once the API answers again"
                )
            else:
                self._stop_reason = (
                    f"Claude produced no kernel in {streak} experiments in a row "
                    f"(last: {error}); stopping"
                )
        if outcome.fatal and spend.calls == 0:
            raise AgentStop(self._stop_reason)  # nothing was spent: no row to record
        proposal.source = context.best_source
        proposal.description = "claude: " + _failure_label(error, outcome)
        proposal.error = one_line(error, 400)
        return proposal

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        if self._pending is None or self._memory is None:
            return
        experiment, hypothesis = self._pending
        self._pending = None
        if hypothesis:
            self._memory.hypotheses[experiment] = hypothesis


_NO_KERNEL = (
    "You have not changed kernel.py. Make this experiment's change with edit_kernel or "
    "write_kernel (with a description and a hypothesis), then end your turn."
)
_CUT_OFF = (
    "Your reply was cut off at the output-token limit. Use edit_kernel for smaller, focused "
    "edits instead of rewriting the whole file."
)


def _failure_label(error: str, outcome: _Outcome) -> str:
    """A short description for the results.tsv row of an experiment without a candidate."""
    if outcome.transient or error.startswith("Claude API"):
        return "no candidate (API failure)"
    for prefix, label in (
        ("malformed API reply", "no candidate (malformed reply)"),
        ("no kernel", "no kernel in the reply"),
        ("kernel.py fails the static check", "kernel fails the static check"),
        ("stopped before an LLM call", "budget reached before a kernel"),
    ):
        if error.startswith(prefix):
            return label
    return "no candidate"


def _block_param(block: Any) -> dict[str, Any]:
    """A response content block as a request param, unchanged (thinking signatures included)."""
    if hasattr(block, "to_dict"):
        return block.to_dict(mode="json", exclude_none=True)
    if hasattr(block, "model_dump"):
        return block.model_dump(exclude_none=True)
    return dict(block)


def _api_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return one_line(str(error["message"]), 200)
    return one_line(str(getattr(exc, "message", exc)), 200)


def make_claude_agent(
    *,
    tuner_sweeps: bool = True,
    seed: int = 0,
    sweep_patience: int = 8,
    max_sweep_experiments: int = 24,
    initial_sweep: bool = True,
    **options: Any,
) -> Agent:
    """The agent behind `--agent claude`: Claude, with the tuner sweeping each new structure.

    `options` are the loop's agent options; the ones ClaudeAgent takes (model, max_cost,
    max_llm_calls, ...) go to it, the rest are dropped. `tuner_sweeps=False` gives Claude alone.
    """
    import inspect

    accepted = inspect.signature(ClaudeAgent.__init__).parameters
    llm = ClaudeAgent(**{k: v for k, v in options.items() if k in accepted and v is not None})
    if not tuner_sweeps:
        return llm
    from autokernel.agents.hybrid import HybridAgent
    from autokernel.agents.tuner import TunerAgent

    return HybridAgent(
        llm,
        TunerAgent(seed=seed),
        sweep_patience=sweep_patience,
        max_sweep_experiments=max_sweep_experiments,
        initial_sweep=initial_sweep,
    )
