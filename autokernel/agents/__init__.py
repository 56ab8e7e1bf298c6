"""Agents that propose kernel.py edits: the offline tuner and the Claude agent.

`make_agent("auto")` picks Claude when ANTHROPIC_API_KEY is set and the Claude agent is
installed, else the tuner. The Claude agent lives in `autokernel.agents.claude` and is imported
only when asked for, because `anthropic` is absent on some machines.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from autokernel.agents.base import Agent

AGENT_NAMES: tuple[str, ...] = ("tuner", "claude", "auto")
PROGRAM_PATH = Path(__file__).resolve().parent / "program.md"


class AgentUnavailable(RuntimeError):
    """The requested agent cannot run here (missing module, package or API key)."""


def _claude_factory() -> Any:
    try:
        module = importlib.import_module("autokernel.agents.claude")
    except ModuleNotFoundError as exc:
        missing = exc.name or "autokernel.agents.claude"
        raise AgentUnavailable(f"the Claude agent cannot be loaded ({missing} is not installed)")
    factory = getattr(module, "make_claude_agent", None) or getattr(module, "ClaudeAgent", None)
    if factory is None:
        raise AgentUnavailable("autokernel.agents.claude defines no ClaudeAgent")
    return factory


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

    Options go to the agent's constructor; ones it does not take are dropped, so the loop can
    offer the same options (seed, model, cost caps) to every agent.
    """
    resolved, _ = resolve_agent_name(name)
    if resolved == "claude":
        return _build(_claude_factory(), options)
    if importlib.util.find_spec("sklearn") is None:  # fail now, not at every experiment
        raise AgentUnavailable("the tuner's surrogate needs scikit-learn: pip install scikit-learn")
    from autokernel.agents.tuner import TunerAgent

    return _build(TunerAgent, options)


def _build(factory: Any, options: dict[str, Any]) -> Agent:
    import inspect

    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return factory(**options)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return factory(**options)
    return factory(**{k: v for k, v in options.items() if k in parameters})
