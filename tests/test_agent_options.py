"""The agent interface is explicit: an option the chosen agent cannot use is an error, not dropped.

A misspelt option, or --max-cost given to the tuner, used to vanish in signature inspection and
the run went on ignoring what the user asked for.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from autokernel.agents import (
    AGENT_OPTIONS,
    AgentOptionError,
    AgentUnavailable,
    check_agent_options,
    make_agent,
)
from autokernel.agents.tuner import TunerAgent


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)


def test_a_misspelt_option_names_itself_and_the_agent() -> None:
    with pytest.raises(AgentOptionError) as error:
        make_agent("tuner", sed=3)
    message = str(error.value)
    assert message == "the tuner agent does not take sed (its options: seed)"
    assert "\n" not in message
    # The CLI catches AgentUnavailable; callers that validate values may catch ValueError.
    assert isinstance(error.value, AgentUnavailable) and isinstance(error.value, ValueError)


def test_a_claude_option_given_to_the_tuner_is_refused() -> None:
    with pytest.raises(AgentOptionError, match=r"the tuner agent does not take max_cost, model"):
        make_agent("tuner", seed=1, max_cost=5.0, model="claude-opus-5-5")


def test_auto_says_why_it_chose_the_agent_that_refuses_the_option() -> None:
    why = r"; auto chose tuner \(ANTHROPIC_API_KEY is not set\)"
    with pytest.raises(AgentOptionError, match=r"does not take max_llm_calls .*" + why):
        make_agent("auto", max_llm_calls=10)
    assert isinstance(make_agent("auto", seed=7), TunerAgent)
    assert make_agent("tuner", seed=7).seed == 7


def test_claude_options_are_checked_before_the_claude_agent_is_built() -> None:
    check_agent_options("claude", {"seed": 1, "model": "m", "max_cost": 1.0,
                                   "max_llm_calls": 2, "tuner_sweeps": False, "drafts": 3})
    with pytest.raises(AgentOptionError, match="the tuner agent does not take drafts"):
        check_agent_options("tuner", {"drafts": 3})
    with pytest.raises(AgentOptionError, match="the claude agent does not take max_costs"):
        check_agent_options("claude", {"max_costs": 1.0})


def test_every_declared_option_is_a_keyword_of_the_agent_it_goes_to() -> None:
    from autokernel.agents.claude import ClaudeAgent, make_claude_agent

    tuner = inspect.signature(TunerAgent).parameters
    assert set(AGENT_OPTIONS["tuner"]) <= set(tuner)
    claude = set(inspect.signature(make_claude_agent).parameters)
    claude |= set(inspect.signature(ClaudeAgent).parameters)  # make_claude_agent forwards these
    assert set(AGENT_OPTIONS["claude"]) <= claude


def test_the_run_command_refuses_max_cost_with_the_tuner(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autokernel.cli import app

    model = tmp_path / "model.py"
    model.write_text("# the model\n")
    result = CliRunner().invoke(app, ["run", str(model), "--device", "cpu", "--agent", "tuner",
                                      "--max-cost", "5", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "the tuner agent does not take max_cost" in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_resuming_with_another_agent_leaves_the_first_agents_options_behind() -> None:
    from autokernel.pipeline.stages import make_run_agent

    saved = {"seed": 3, "model": "claude-opus-5-5", "max_cost": 2.0}
    agent, name, _ = make_run_agent("tuner", {}, saved_options=saved)
    assert name == "tuner" and isinstance(agent, TunerAgent) and agent.seed == 3
