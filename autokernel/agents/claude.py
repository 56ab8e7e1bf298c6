"""The Claude agent: each experiment is one short tool-use conversation with the Messages API.

Per experiment the agent sends the playbook (program.md), the target and its reference, the current
best kernel.py, the GPU and where the best sits on its roofline, and a compact history of what was
tried; Claude edits an in-memory kernel.py with the tools of `claude_tools` and ends its turn. The
edited file is the proposal; the loop benchmarks it and keeps or reverts it.

The conversation edits a parent picked on the target's frontier (`frontier`): mostly the current
best, sometimes another passing structure (a near-miss), so a structure slower alone can still lead
somewhere. With `drafts` N, each round is N conversations, handed to the loop one per experiment.

The parts, one module each:
- `claude_prompt`: what Claude is told (role, playbook, target, best, bounded history, lessons).
- `claude_planner`: one request without tools before each conversation, writing 2-3 plans tied to
  lines of the kernel; the conversation implements one. A failed planning call only loses the plans.
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
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autokernel.agents.base import Agent, AgentContext, AgentStop, Proposal
from autokernel.agents.claude_checks import (
    CheckRunners, CheckTarget, DraftChecks, account_checks,
)
from autokernel.agents.claude_errors import (
    MODEL_ENV, ClaudeConfigError, FailureStreak, Outcome, experiment_error, failure_label,
)
from autokernel.agents.claude_loop import ToolLoop
from autokernel.agents.claude_planner import Planner
from autokernel.agents.claude_prompt import (
    PROGRAM_FILE, extract_lesson, load_program, opening_message,
)
from autokernel.agents.claude_spend import RunBudget, Spend, price_for
from autokernel.agents.claude_tools import KERNEL_FILE, KernelDraft, WorkspaceReader, one_line
from autokernel.agents.frontier import Frontier, parent_tag
from autokernel.harness.result import BenchResult

DEFAULT_MODEL = "claude-sonnet-5-5"
EFFORT_ENV = "AUTOKERNEL_CLAUDE_EFFORT"
EFFORTS = ("low", "medium", "high", "xhigh", "max")
PLANNER_MODEL_ENV = "AUTOKERNEL_CLAUDE_PLANNER_MODEL"


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
        drafts: int = 1,
        frontier_size: int = 4,
        explore: float = 0.25,
        seed: int = 0,
        planner: bool = True,
        planner_model: str | None = None,
        planner_max_tokens: int = 2_048,
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
        if drafts < 1:
            raise ClaudeConfigError(f"drafts must be at least 1; got {drafts}")
        self.drafts = drafts
        try:
            self.frontier = Frontier(size=frontier_size, explore=explore, seed=seed)
        except ValueError as exc:
            raise ClaudeConfigError(str(exc)) from exc
        # This round's drafts not yet handed to the loop, and the target they belong to.
        self._queue: deque[Proposal] = deque()
        self._queue_target: tuple[Any, ...] | None = None
        self.failures = FailureStreak(max_consecutive_failures, failure_backoff_s, sleep)
        self._client = _make_client(anthropic, timeout, max_retries, api_key, base_url, http_client)
        self._tool_loop = ToolLoop(client=self._client, model=self.model, max_tokens=max_tokens,
                                   effort=self.effort, max_turns=max(1, max_turns),
                                   budget=self.budget)
        # Plans before each coder conversation: one request without tools (claude_planner).
        self.planner: Planner | None = None
        if planner:
            model_of_plans = planner_model or os.environ.get(PLANNER_MODEL_ENV) or self.model
            if max_cost is not None and price_for(model_of_plans) is None:
                raise ClaudeConfigError(f"no price is known for planner model {model_of_plans!r}, "
                                        "so --max-cost cannot be enforced")
            self.planner = Planner(client=self._client, model=model_of_plans, budget=self.budget,
                                   max_tokens=planner_max_tokens)
        self._stop_reason = ""
        self._check_runners = checks or CheckRunners()  # compile_kernel / test_kernel

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

    @property
    def queued_drafts(self) -> int:
        """Drafts of this round written and not handed out yet: a loop judging experiments on
        several GPUs (autokernel.parallel) takes them at once, side by side."""
        return len(self._queue)

    def budget_stop_reason(self, prompt_chars: int = 0) -> str:
        """Why the next request must not be made (a cap would be crossed), or ''."""
        return self.budget.stop_reason(prompt_chars)

    # -- Agent protocol ---------------------------------------------------------------------

    def propose(self, context: AgentContext) -> Proposal | None:
        """The next queued draft; with none left, a round of `drafts` conversations first."""
        target = (context.target.rank, context.target.kernel_type)
        if self._queue and self._queue_target == target:
            return self._hand_out(self._queue.popleft(), context)
        self._queue.clear()  # drafts of a target the loop has left are stale
        self._queue_target = target
        if self._stop_reason:
            raise AgentStop(self._stop_reason)
        self.budget.open_ledger(context.workspace)
        stop = self.budget.stop_reason()
        if stop:
            raise AgentStop(stop)
        self.frontier.sync(context)
        for slot in range(self.drafts):
            if slot and (self._stop_reason or self.budget.stop_reason()):
                break  # what this round already drafted is paid for: hand it out first
            try:
                self._queue.append(self._draft(context, slot))
            except AgentStop:
                if not self._queue:
                    raise
                break
        return self._hand_out(self._queue.popleft(), context)

    def _hand_out(self, proposal: Proposal, context: AgentContext) -> Proposal:
        if not proposal.error:  # its source, for the frontier of this run and of a resume
            self.frontier.remember(context.experiment, proposal.source, context.workspace)
        return proposal

    def _draft(self, context: AgentContext, slot: int) -> Proposal:
        """One conversation: Claude edits a parent picked on the frontier (or context.parent)."""
        parent = context.parent or self.frontier.pick(context.experiment, slot)
        siblings = [p.description for p in self._queue if not p.error]
        context = replace(context, parent=parent, sibling_drafts=siblings)
        proposal = self._converse_draft(context, parent.source)
        if not parent.is_best:
            proposal.description = parent_tag(parent.experiment) + proposal.description
        return proposal

    def _converse_draft(self, context: AgentContext, original: str) -> Proposal:
        self.failures.wait_before_next_try()
        draft = KernelDraft(original=original, kernel_type=context.target.kernel_type)
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
        try:
            from autokernel.kernelfile import parse_kernel_source

            proposal.tunables = dict(parse_kernel_source(draft.source).tunables)
        except ValueError:
            pass
        return proposal

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        # What was tried and why comes back from results.tsv (each Attempt's hypothesis) and the
        # target's lessons.md, so nothing needs remembering here: a resume loses nothing. The
        # frontier, too, reads each verdict back from the history (autokernel.agents.frontier).
        return None

    def remember_source(self, experiment: int, source: str) -> None:
        """A passing kernel another agent proposed (a tuner sweep's configuration), so that the
        frontier can edit that structure at its fastest configuration."""
        self.frontier.remember(experiment, source)

    # -- the steps of an experiment ---------------------------------------------------------

    def _converse(self, context: AgentContext, draft: KernelDraft, spend: Spend,
                  checks: DraftChecks | None = None) -> Outcome:
        overlay = {KERNEL_FILE: draft.source}
        if context.workspace is None:
            overlay.update({"reference.py": context.reference_source,
                            PROGRAM_FILE: load_program(None)})
        reader = WorkspaceReader(context.workspace, overlay)
        try:
            program = load_program(context.workspace)
            plans = self.planner.plan(program, context, self.history_limit, spend) \
                if self.planner is not None else ""
            opening = opening_message(context, self.history_limit, plans)
            return self._tool_loop.converse(program, opening, draft, reader, spend, checks)
        except Exception as exc:  # a reply this code did not foresee must not end the night
            return Outcome(error=f"unexpected reply: {type(exc).__name__}: {exc}")

    def _proposal(self, draft: KernelDraft, outcome: Outcome, spend: Spend) -> Proposal:
        return Proposal(
            source=draft.source,
            description=draft.description
            or one_line(outcome.final_text or "claude edit (no description given)"),
            hypothesis=draft.hypothesis or one_line(outcome.final_text, 400),
            lesson=extract_lesson(outcome.final_text),
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
            "the claude agent needs the anthropic package (pip install 'autokernel[claude]'); "
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
    is a TypeError), `seed` to the tuner and the frontier's draws. `tuner_sweeps=False` gives
    Claude alone, with the tuner only as the stand-in once the LLM cannot go on.
    """
    llm = ClaudeAgent(seed=seed, **claude_options)
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
