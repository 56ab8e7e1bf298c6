"""The Claude agent's planner: one cheap request, without tools, before each experiment's coder.

The planner reads the briefing (the target and its reference, the current best kernel.py with line
numbers, the roofline, the history, the target's lessons.md) and writes 2-3 concrete plans, each
tied to lines of the best kernel and with a predicted effect. The coder conversation then starts
from those plans and says in its hypothesis which one it implements.

Planning is advice: a request the budget does not allow, an API error or an empty reply leaves
the coder without plans, never the experiment without a kernel. Its tokens and dollars count in
the experiment's Spend and the run's budget like any other request. `anthropic` is imported
inside the function that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autokernel.agents.base import AgentContext
from autokernel.agents.claude_prompt import CACHE_CONTROL, describe_target, kernel_briefing
from autokernel.agents.claude_spend import RunBudget, Spend, usage_spend

PLANNER_MAX_TOKENS = 2_048
# The SDK's retries for the planning request: an overloaded API should cost the coder's retries
# once, not the planner's as well.
PLANNER_RETRIES = 1
MAX_PLANS_CHARS = 6_000  # what the coder's prompt carries of the plans

PLANNER_ROLE = """\
You are the planner of autokernel, an overnight GPU-kernel optimizer. Before each experiment on a \
target you read the briefing and write plans; a separate coder then implements ONE of them as an \
edit of kernel.py (Triton), which the harness checks for correctness and benchmarks. You have no \
tools and write no code beyond short snippets.

Block sizes, num_warps, num_stages and algorithm variants are swept by a tuner from the kernel's \
TUNABLE_SPACE: plan structural changes, and name the knobs they need. The playbook follows; plans \
must obey its rules."""

PLANNING_ASK = """\
# Your task
Write 2 or 3 concrete plans for the next experiment, most promising first, in this form:

Plan 1: <one-line title>
- where: <line ranges of the kernel.py above, e.g. L12-L30, or a short quoted snippet>
- change: <what to change there, specifically>
- predicted effect: <expected speedup at the benchmarked shape and why (roofline, launches, \
memory traffic)>
- risk: <what could break correctness or fail to compile>

Use the history and the lessons: do not plan what was reverted or failed unless you say how the \
plan avoids the reason. Write nothing else."""


def numbered(source: str) -> str:
    """The source with right-aligned line numbers, as the plans cite them (L12-L30)."""
    lines = source.rstrip().splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}}| {line}" for n, line in enumerate(lines, start=1))


def planning_briefing(context: AgentContext, history_limit: int) -> str:
    """What the planner reads after the target: the kernel the coder will edit (the best, or the
    frontier's parent) with line numbers, then where the target stands."""
    parts = kernel_briefing(context, history_limit, "line numbers added; the coder edits this "
                            "file", render=numbered, fence="```")
    parts += [f"# Experiment {context.experiment}", PLANNING_ASK]
    return "\n".join(parts)


@dataclass
class Planner:
    """One planning request per experiment through `client` (an `anthropic.Anthropic`)."""

    client: Any
    model: str
    budget: RunBudget
    max_tokens: int = PLANNER_MAX_TOKENS
    last_error: str = ""  # why the last planning gave no plans ('' when it gave some)

    def plan(self, program: str, context: AgentContext, history_limit: int, spend: Spend) -> str:
        """The plans for this experiment, or '' (see `last_error`); the call's cost is counted."""
        self.last_error = ""
        system = [
            {"type": "text", "text": PLANNER_ROLE},
            {"type": "text", "text": "# The playbook (program.md)\n\n" + program,
             "cache_control": CACHE_CONTROL},
        ]
        content = [
            {"type": "text", "text": describe_target(context), "cache_control": CACHE_CONTROL},
            {"type": "text", "text": planning_briefing(context, history_limit)},
        ]
        stop = self.budget.stop_reason(len(program) + sum(len(c["text"]) for c in content))
        if stop:
            self.last_error = f"no planning call: {stop}"
            return ""
        try:
            client = self.client.with_options(max_retries=PLANNER_RETRIES) \
                if hasattr(self.client, "with_options") else self.client
            response = client.messages.create(
                model=self.model, max_tokens=self.max_tokens, system=system,
                messages=[{"role": "user", "content": content}],
            )
        except Exception as exc:  # any failure: the coder goes on without plans
            self.last_error = f"planning call failed: {type(exc).__name__}: {exc}"
            return ""
        call = usage_spend(str(getattr(response, "model", "") or self.model),
                           getattr(response, "usage", None), fallback_model=self.model)
        spend.add(call)
        self.budget.record(call)
        blocks = list(getattr(response, "content", None) or [])
        text = "\n".join(str(b.text) for b in blocks
                         if getattr(b, "type", None) == "text" and getattr(b, "text", None))
        text = text.strip()
        if not text:
            self.last_error = "the planner's reply had no text"
            return ""
        if len(text) > MAX_PLANS_CHARS:
            text = text[:MAX_PLANS_CHARS].rstrip() + "\n[plans cut here]"
        return text
