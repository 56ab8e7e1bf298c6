"""Agents that propose kernel.py edits: the offline tuner and the Claude agent.

`make_agent("auto")` picks Claude when ANTHROPIC_API_KEY is set and the Claude agent is
installed, else the tuner. The Claude agent lives in `autokernel.agents.claude` and is imported
only when asked for, because `anthropic` is absent on some machines.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autokernel.agents.base import Agent

AGENT_NAMES: tuple[str, ...] = ("tuner", "claude", "auto")
# The options each agent takes from `make_agent`, and nothing else: an option dropped in silence
# (a misspelling, or --max-cost given to the tuner) would make a run ignore what the user asked.
AGENT_OPTIONS: dict[str, tuple[str, ...]] = {
    "tuner": ("seed",),
    # seed: the tuner that sweeps each new structure's tunables (tuner_sweeps=False: Claude alone)
    # and the frontier's draws; drafts: conversations per round (autokernel.agents.frontier);
    # planner: a planning request before each conversation, planner_model its model
    # (autokernel.agents.claude_planner)
    "claude": ("seed", "model", "max_cost", "max_llm_calls", "tuner_sweeps", "drafts",
               "planner", "planner_model"),
}
PROGRAM_PATH = Path(__file__).resolve().parent / "program.md"


class AgentUnavailable(RuntimeError):
    """The requested agent cannot run here (missing module, package or API key)."""


class AgentOptionError(AgentUnavailable, ValueError):
    """An option the chosen agent does not take."""


# What the claude agent's one-line refusal tells the user to install (pyproject's extra).
CLAUDE_INSTALL_HINT = "pip install 'autokernel[claude]'"


def _claude_factory() -> Any:
    if importlib.util.find_spec("anthropic") is None:  # an optional extra since issue 29
        raise AgentUnavailable(f"the Claude agent needs the anthropic package: "
                               f"{CLAUDE_INSTALL_HINT}")
    try:
        module = importlib.import_module("autokernel.agents.claude")
    except ModuleNotFoundError as exc:
        missing = exc.name or "autokernel.agents.claude"
        raise AgentUnavailable(f"the Claude agent cannot be loaded ({missing} is not installed)")
    return module.make_claude_agent


def resolve_agent_name(name: str) -> tuple[str, str]:
    """Map "auto" to the agent that will run; return (name, a line saying which and why)."""
    if name not in AGENT_NAMES:
        raise AgentUnavailable(f"unknown agent {name!r}; choose one of: {', '.join(AGENT_NAMES)}")
    has_key = bool(os.environ.get("ANTHROPIC_API_KEY"))
    if name == "claude":
        if not has_key and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):  # a gateway's bearer token
            raise AgentUnavailable("--agent claude needs ANTHROPIC_API_KEY (or, behind a gateway, "
                                   "ANTHROPIC_AUTH_TOKEN) in the environment")
        _claude_factory()
        return "claude", "agent: claude"
    if name == "tuner":
        return "tuner", "agent: tuner (offline model-based search)"
    if not has_key:
        return "tuner", "agent: tuner (ANTHROPIC_API_KEY is not set)"
    try:
        _claude_factory()
    except AgentUnavailable as exc:
        return "tuner", f"agent: tuner ({exc}; falling back to the offline tuner)"
    return "claude", "agent: claude (ANTHROPIC_API_KEY is set)"


def make_agent(name: str, **options: Any) -> Agent:
    """Build the agent `name` ("tuner", "claude" or "auto", resolved as `resolve_agent_name`).

    Each agent takes only the options `AGENT_OPTIONS` declares for it; any other raises
    AgentOptionError naming the option and the agent.
    """
    resolved, note = resolve_agent_name(name)
    check_agent_options(resolved, options, chosen_because=note if name == "auto" else "")
    if resolved == "claude":
        return _claude_factory()(**options)
    if importlib.util.find_spec("sklearn") is None:  # fail now, not at every experiment
        raise AgentUnavailable("the tuner's surrogate needs scikit-learn: pip install scikit-learn")
    from autokernel.agents.tuner import TunerAgent

    return TunerAgent(**options)


def check_agent_options(name: str, options: Mapping[str, Any], chosen_because: str = "") -> None:
    """Refuse the options agent `name` (resolved) does not take, in one line naming them."""
    accepted = AGENT_OPTIONS[name]
    refused = [option for option in options if option not in accepted]
    if not refused:
        return
    why = f"; auto chose {chosen_because.removeprefix('agent: ')}" if chosen_because else ""
    raise AgentOptionError(
        f"the {name} agent does not take {', '.join(refused)} "
        f"(its options: {', '.join(accepted)}){why}"
    )
