"""The Claude agent: each experiment is one short tool-use conversation with the Messages API.

Per experiment the agent sends the playbook (program.md), the target and its reference, the current
best kernel.py, the GPU and where the best sits on its roofline, and a compact history of what was
tried; Claude edits an in-memory kernel.py with the tools of `claude_tools` and ends its turn. The
edited file is the proposal; the loop benchmarks it and keeps or reverts it.

The parts, one module each:
- `claude_prompt`: what Claude is told (role, playbook, target, best, bounded history).
- `claude_loop`: the conversation of one experiment (requests, tools, nudges, `max_turns`).
- `claude_spend`: prices, each reply's cost, and the run's `--max-cost`/`--max-llm-calls` caps,
  kept in the workspace so a resumed run goes on counting.
- `claude_errors`: the error policy. A reply without a kernel, a malformed one, or an API failure
  after the SDK's retries is a failed experiment (`Proposal.error`), never a crash; repeated
  failures, an unusable key or an unknown model end the run cleanly through `AgentStop`.

`anthropic` is imported only inside functions: the GPU machines may not have it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autokernel.agents.base import Agent, AgentContext, AgentStop, Proposal
from autokernel.agents.claude_checks import (
    CheckRunners, CheckTarget, DraftChecks, account_checks,
)
from autokernel.agents.claude_errors import (
    MODEL_ENV, ClaudeConfigError, FailureStreak, Outcome, experiment_error, failure_label,
)
from autokernel.agents.claude_loop import ToolLoop
from autokernel.agents.claude_prompt import PROGRAM_FILE, load_program, opening_message
from autokernel.agents.claude_spend import RunBudget, Spend
from autokernel.agents.claude_tools import KERNEL_FILE, KernelDraft, WorkspaceReader, one_line
from autokernel.harness.result import BenchResult

DEFAULT_MODEL = "claude-sonnet-5-5"
EFFORT_ENV = "AUTOKERNEL_CLAUDE_EFFORT"
EFFORTS = ("low", "medium", "high", "xhigh", "max")


@dataclass
class _TargetMemory:
    """The hypotheses behind this target's experiments, shown next to their results."""

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
        checks: CheckRunners | None = None,
    ) -> None:
        anthropic = _import_sdk()
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.budget = RunBudget(self.model, max_cost, max_llm_calls)
        self.effort = effort or os.environ.get(EFFORT_ENV) or None
        if self.effort is not None and self.effort not in EFFORTS:
            raise ClaudeConfigError(
                f"effort must be one of {', '.join(EFFORTS)}; got {self.effort!r}"
            )
        self.history_limit = history_limit
        self.failures = FailureStreak(max_consecutive_failures, failure_backoff_s, sleep)
        self._client = _make_client(anthropic, timeout, max_retries, api_key, base_url, http_client)
        self._tool_loop = ToolLoop(client=self._client, model=self.model, max_tokens=max_tokens,
                                   effort=self.effort, max_turns=max(1, max_turns),
                                   budget=self.budget)
        self._stop_reason = ""
        self._check_runners = checks or CheckRunners()  # compile_kernel / test_kernel
        self._memory: _TargetMemory | None = None
        self._pending: tuple[int, str] | None = None  # (experiment, hypothesis) awaiting observe

    # -- the run's spend, for the loop's report -------------------------------------------

    @property
    def total(self) -> Spend:
        return self.budget.total

    @property
    def max_cost(self) -> float | None:
        return self.budget.max_cost

    @property
    def max_llm_calls(self) -> int | None:
        return self.budget.max_llm_calls

    def budget_stop_reason(self, prompt_chars: int = 0) -> str:
        """Why the next request must not be made (a cap would be crossed), or ''."""
        return self.budget.stop_reason(prompt_chars)

    # -- Agent protocol ---------------------------------------------------------------------

    def propose(self, context: AgentContext) -> Proposal | None:
        if self._stop_reason:
            raise AgentStop(self._stop_reason)
        self.budget.open_ledger(context.workspace)
        stop = self.budget.stop_reason()
        if stop:
            raise AgentStop(stop)
        self._remember_target(context)
        self.failures.wait_before_next_try()

        draft = KernelDraft(original=context.best_source, kernel_type=context.target.kernel_type)
        spend = Spend()
        checks = DraftChecks(CheckTarget.from_context(context), self._check_runners)
        outcome = self._converse(context, draft, spend, checks)
        if outcome.budget_stop:
            self._stop_reason = outcome.budget_stop
        proposal = self._proposal(draft, outcome, spend)
        account_checks(proposal, checks, context.experiment, context.workspace)
        error = experiment_error(outcome, draft)
        if error:
            return self._no_candidate(context, proposal, error, outcome, spend)
        self.failures.succeeded()
        self._pending = (context.experiment, proposal.hypothesis)
        try:
            from autokernel.kernelfile import parse_kernel_source

            proposal.tunables = dict(parse_kernel_source(draft.source).tunables)
        except ValueError:
            pass
        return proposal

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        if self._pending is None or self._memory is None:
            return
        experiment, hypothesis = self._pending
        self._pending = None
        if hypothesis:
            self._memory.hypotheses[experiment] = hypothesis

    # -- the steps of an experiment ---------------------------------------------------------

    def _remember_target(self, context: AgentContext) -> None:
        key = (context.target.rank, context.target.kernel_type)
        if self._memory is None or self._memory.key != key:
            self._memory = _TargetMemory(key=key)

    def _converse(self, context: AgentContext, draft: KernelDraft, spend: Spend,
                  checks: DraftChecks | None = None) -> Outcome:
        overlay = {KERNEL_FILE: draft.source}
        if context.workspace is None:
            overlay.update({"reference.py": context.reference_source,
                            PROGRAM_FILE: load_program(None)})
        reader = WorkspaceReader(context.workspace, overlay)
        try:
            program = load_program(context.workspace)
            hypotheses = self._memory.hypotheses if self._memory else {}
            opening = opening_message(context, hypotheses, self.history_limit)
            return self._tool_loop.converse(program, opening, draft, reader, spend, checks)
        except Exception as exc:  # a reply this code did not foresee must not end the night
            return Outcome(error=f"unexpected reply: {type(exc).__name__}: {exc}")

    def _proposal(self, draft: KernelDraft, outcome: Outcome, spend: Spend) -> Proposal:
        return Proposal(
            source=draft.source,
            description=draft.description
            or one_line(outcome.final_text or "claude edit (no description given)"),
            hypothesis=draft.hypothesis or one_line(outcome.final_text, 400),
            suggested_configs=list(draft.suggested_configs),
            input_tokens=spend.prompt_tokens,
            output_tokens=spend.output_tokens,
            cost_usd=spend.cost_or_none,
            cache_read_tokens=spend.cache_read_tokens,
            cache_write_tokens=spend.cache_write_tokens,
            llm_calls=spend.calls,
            agent=self.name,
        )

    def _no_candidate(self, context: AgentContext, proposal: Proposal, error: str,
                      outcome: Outcome, spend: Spend) -> Proposal:
        """The failed experiment's row (the best's source, the error); maybe the run's end."""
        streak_stop = self.failures.failed(error, outcome.transient)
        if outcome.fatal:
            self._stop_reason = outcome.fatal
        elif streak_stop and not self._stop_reason:
            self._stop_reason = streak_stop
        if outcome.fatal and spend.calls == 0:
            raise AgentStop(self._stop_reason)  # nothing was spent: no row to record
        proposal.source = context.best_source
        proposal.description = "claude: " + failure_label(error, outcome)
        proposal.error = one_line(error, 400)
        return proposal


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError as exc:
        raise ClaudeConfigError(
            "the claude agent needs the anthropic package (pip install anthropic); "
            "--agent tuner works without it"
        ) from exc
    return anthropic


def _make_client(anthropic: Any, timeout: float, max_retries: int, api_key: str | None,
                 base_url: str | None, http_client: Any) -> Any:
    """The SDK client, which retries and times out on its own; refused without credentials."""
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
        client = anthropic.Anthropic(**options)
    except (anthropic.AnthropicError, ValueError, TypeError) as exc:
        raise ClaudeConfigError(
            f"cannot set up the Anthropic client ({one_line(str(exc), 200)}); "
            "set ANTHROPIC_API_KEY, or use --agent tuner, which works offline"
        ) from exc
    if not (client.api_key or client.auth_token or getattr(client, "credentials", None)):
        raise ClaudeConfigError(
            "the claude agent needs Anthropic credentials: set ANTHROPIC_API_KEY "
            "(or use --agent tuner, which works offline)"
        )
    return client


def make_claude_agent(
    *,
    seed: int = 0,
    tuner_sweeps: bool = True,
    sweep_patience: int = 8,
    max_sweep_experiments: int = 24,
    initial_sweep: bool = True,
    **claude_options: Any,
) -> Agent:
    """The agent behind `--agent claude`: Claude, with the tuner sweeping each new structure.

    `claude_options` go to ClaudeAgent (model, max_cost, max_llm_calls, ...; one it does not take
    is a TypeError), `seed` to the tuner. `tuner_sweeps=False` gives Claude alone, with the tuner
    only as the stand-in once the LLM cannot go on.
    """
    llm = ClaudeAgent(**claude_options)
    from autokernel.agents.hybrid import HybridAgent
    from autokernel.agents.tuner import TunerAgent

    # Without sweeps the hybrid is still the wrapper: if the API keeps failing, the tuner goes on.
    return HybridAgent(
        llm,
        TunerAgent(seed=seed),
        sweep_patience=sweep_patience,
        max_sweep_experiments=max_sweep_experiments,
        initial_sweep=initial_sweep,
        structure_sweeps=tuner_sweeps,
    )
