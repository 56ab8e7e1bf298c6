"""The Claude agent's error policy: what an API error, a reply without a kernel, or a streak of
failures means for the run.

A failed experiment is never a crash: it becomes a `Proposal.error` row and the loop asks again.
Only three things end the run (through `AgentStop`): a fatal API answer (credentials refused,
unknown model, payment required), `max_consecutive_failures` failures in a row, or a spent budget.
The SDK itself retries 408/409/429/5xx/529 with backoff; what reaches here has survived those
retries, so a transient failure also makes the next experiment wait (`FailureStreak`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from autokernel.agents import AgentUnavailable
from autokernel.agents.claude_tools import KernelDraft, one_line

MODEL_ENV = "AUTOKERNEL_CLAUDE_MODEL"
MAX_BACKOFF_S = 600.0


class ClaudeConfigError(AgentUnavailable):
    """The agent cannot be set up as asked (no credentials, a cost cap without a known price)."""


@dataclass
class Outcome:
    """How one experiment's conversation ended."""

    error: str = ""
    transient: bool = False  # an API failure worth waiting before the next try
    fatal: str = ""  # stop the run after this experiment
    final_text: str = ""
    budget_stop: str = ""  # a cap was reached before a request: stop the run after this one


def classify_api_error(exc: Exception, model: str) -> Outcome:
    """An SDK exception (after the SDK's retries) as a failed experiment, fatal or transient."""
    import anthropic

    if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
        return Outcome(
            error=f"Claude API refused the credentials ({exc.status_code})",
            fatal="the Claude API refused the credentials: check ANTHROPIC_API_KEY "
            f"(HTTP {exc.status_code}: {api_message(exc)})",
        )
    if isinstance(exc, anthropic.NotFoundError):
        return Outcome(
            error=f"model {model} not found",
            fatal=f"the Claude API does not know model {model!r} (HTTP 404: "
            f"{api_message(exc)}); choose another with --model or {MODEL_ENV}",
        )
    if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 402:
        return Outcome(
            error="Claude API: payment required",
            fatal=f"the Claude API answered 402 (payment required): {api_message(exc)}",
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return Outcome(error="Claude API: request timed out after retries", transient=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return Outcome(error=f"Claude API unreachable after retries: {exc}", transient=True)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind = {429: "rate limited", 529: "overloaded"}.get(status, f"HTTP {status}")
        return Outcome(
            error=f"Claude API {kind} ({status}) after retries: {api_message(exc)}",
            transient=status in (408, 409, 429) or status >= 500,
        )
    return Outcome(error=f"Claude API error: {type(exc).__name__}: {exc}")


def api_message(exc: Exception) -> str:
    """The API's own one-line explanation of an error, from its JSON body when there is one."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return one_line(str(error["message"]), 200)
    return one_line(str(getattr(exc, "message", exc)), 200)


def experiment_error(outcome: Outcome, draft: KernelDraft) -> str:
    """Why this experiment has no candidate, or '' when the draft is worth benchmarking."""
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
    return error


def failure_label(error: str, outcome: Outcome) -> str:
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


class FailureStreak:
    """Failed experiments in a row: when to wait before the next one, and when to give up."""

    def __init__(
        self,
        max_consecutive_failures: int,
        failure_backoff_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_consecutive_failures = max(1, max_consecutive_failures)
        self.failure_backoff_s = failure_backoff_s
        self._sleep = sleep
        self.consecutive = 0
        self.transient = 0  # the latest of them that were transient API failures, in a row

    def wait_before_next_try(self) -> None:
        """An overloaded or unreachable API: give it time before asking again."""
        if self.transient:
            self._sleep(min(self.failure_backoff_s * 2 ** (self.transient - 1), MAX_BACKOFF_S))

    def succeeded(self) -> None:
        self.consecutive = 0
        self.transient = 0

    def failed(self, error: str, transient: bool) -> str:
        """Count a failure; return why the run should stop, or '' while the streak is short."""
        self.consecutive += 1
        self.transient = self.transient + 1 if transient else 0
        streak = self.consecutive
        if streak < self.max_consecutive_failures:
            return ""
        if self.transient == streak:
            return (
                f"the Claude API failed in {streak} experiments in a row, each after the "
                f"SDK's retries (last: {error}); stopping - `autokernel resume` continues "
                "the run once the API answers again"
            )
        return (
            f"Claude produced no kernel in {streak} experiments in a row (last: {error}); stopping"
        )
