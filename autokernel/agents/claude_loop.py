"""The Claude agent's tool loop: one experiment is one short tool-use conversation.

Each turn: check the budget, send the conversation, price the reply, run the tools Claude asked
for and send their results back. The conversation ends when Claude ends its turn with a changed
kernel that passes the static check, or after `max_turns` requests; a turn that ends without one
gets a nudge (no edit yet, a reply cut off, a static-check failure) while turns are left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autokernel.agents.claude_checks import DraftChecks
from autokernel.agents.claude_errors import Outcome, classify_api_error
from autokernel.agents.claude_prompt import (
    CACHE_CONTROL, CUT_OFF_NUDGE, NO_KERNEL_NUDGE, system_blocks,
)
from autokernel.agents.claude_spend import RunBudget, Spend, usage_spend
from autokernel.agents.claude_tools import (
    TOOL_SCHEMAS, KernelDraft, ToolBox, WorkspaceReader, one_line,
)

# Why a reply ended that leaves nothing to continue: the conversation is over for this experiment.
DEAD_ENDS = ("refusal", "model_context_window_exceeded")


@dataclass
class ToolLoop:
    """The requests of one experiment, sent through `client` (an `anthropic.Anthropic`)."""

    client: Any
    model: str
    max_tokens: int
    effort: str | None
    max_turns: int
    budget: RunBudget

    def converse(
        self,
        program: str,
        opening: dict[str, Any],
        draft: KernelDraft,
        reader: WorkspaceReader,
        spend: Spend,
        checks: DraftChecks | None = None,
    ) -> Outcome:
        """Talk until Claude leaves a kernel in `draft`; every request's cost goes into `spend`."""
        import anthropic

        system = system_blocks(program)
        messages: list[dict[str, Any]] = [opening]
        toolbox = ToolBox(draft=draft, reader=reader, checks=checks)
        final_text = ""
        for turn in range(self.max_turns):
            prompt_chars = len(program) + sum(len(str(m["content"])) for m in messages)
            stop = self.budget.stop_reason(prompt_chars)
            if stop:
                return Outcome(error=f"stopped before an LLM call: {stop}", final_text=final_text,
                               budget_stop=stop)
            try:
                response = self._request(system, messages)
            except anthropic.AnthropicError as exc:
                return classify_api_error(exc, self.model)
            except ValueError as exc:  # a body that is not JSON
                return Outcome(error=f"malformed API reply: {one_line(str(exc), 160)}")
            call = usage_spend(
                str(getattr(response, "model", "") or self.model), getattr(response, "usage", None),
                fallback_model=self.model,
            )
            spend.add(call)
            self.budget.record(call)

            blocks = list(getattr(response, "content", None) or [])
            texts = [b.text for b in blocks if getattr(b, "type", None) == "text" and b.text]
            if texts:
                final_text = texts[-1]
            tool_uses = [b for b in blocks if getattr(b, "type", None) == "tool_use"]
            stop_reason = getattr(response, "stop_reason", None)
            if stop_reason in DEAD_ENDS:
                return Outcome(error=f"Claude stopped: {stop_reason}", final_text=final_text)
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
                    results.append({"type": "text", "text": CUT_OFF_NUDGE})
                messages.append({"role": "user", "content": results})
                continue
            nudge = _nudge(blocks, stop_reason, draft)
            if not nudge:
                return Outcome(final_text=final_text)
            if turn + 1 < self.max_turns:
                messages.append({"role": "user", "content": [{"type": "text", "text": nudge}]})
        return Outcome(final_text=final_text)

    def _request(self, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Any:
        extra: dict[str, Any] = {}
        if self.effort:
            extra["output_config"] = {"effort": self.effort}
        return self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            system=system,
            tools=TOOL_SCHEMAS,
            messages=_with_tail_cache(messages),
            **extra,
        )


def _nudge(blocks: list[Any], stop_reason: str | None, draft: KernelDraft) -> str:
    """What to tell Claude when its turn ended without a usable kernel, or '' when it has one."""
    if not blocks:
        return "Your reply was empty. " + NO_KERNEL_NUDGE
    if stop_reason == "max_tokens":
        return CUT_OFF_NUDGE
    if not draft.changed:
        return NO_KERNEL_NUDGE
    if draft.problems():
        listed = "\n".join(f"- {p}" for p in draft.problems())
        return (f"kernel.py fails the static check:\n{listed}\n"
                "Fix it with edit_kernel, then end your turn.")
    return ""


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
        content[-1]["cache_control"] = CACHE_CONTROL
    last["content"] = content
    return out


def _block_param(block: Any) -> dict[str, Any]:
    """A response content block as a request param, unchanged (thinking signatures included)."""
    if hasattr(block, "to_dict"):
        return block.to_dict(mode="json", exclude_none=True)
    if hasattr(block, "model_dump"):
        return block.model_dump(exclude_none=True)
    return dict(block)
