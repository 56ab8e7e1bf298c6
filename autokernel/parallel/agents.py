"""The agent of each target when targets run in parallel, and when it may propose ahead.

The tuner serves every target from one instance (its search is keyed by target, rebuilt from the
history on every call) and proposes in milliseconds, naming the candidates still in flight
(`AgentContext.sibling_drafts`) so that it never proposes one twice: a target alone on several
GPUs gets a batch of the tuner's picks judged side by side. An LLM agent (`--agent claude`)
keeps per-target state (its round of drafts, the tuner sweep of a structure), so each target gets
an instance of its own, all sharing the run's spend caps (`autokernel.agents.claude_spend`); it
proposes ahead only the drafts of its round already written (`queued_drafts`), which are then
judged side by side.
"""

from __future__ import annotations

from collections.abc import Callable

from autokernel.agents.base import Agent


class TargetAgents:
    """`of(tag)`: the agent that proposes for target `tag`."""

    def __init__(self, first: Agent, make: Callable[[], Agent] | None = None) -> None:
        self.first = first
        self._make = make
        self._shared = bool(getattr(first, "serves_many_targets", False)) or make is None
        self._by_target: dict[str, Agent] = {}

    def of(self, tag: str) -> Agent:
        if self._shared:
            return self.first
        if tag not in self._by_target:
            # The first target takes the agent the run was started with.
            assert self._make is not None
            self._by_target[tag] = self._make() if self._by_target else self.first
        return self._by_target[tag]

    def all(self) -> list[Agent]:
        return [self.first] if self._shared else list(self._by_target.values()) or [self.first]

    def can_propose_ahead(self, tag: str) -> bool:
        """Whether target `tag` may get another candidate while one of its own is in flight."""
        agent = self.of(tag)
        if getattr(agent, "serves_many_targets", False):
            return True
        queued = getattr(agent, "queued_drafts", 0)
        return isinstance(queued, int) and queued > 0
