"""The Claude agent, offline: Messages API replies replayed through the SDK's own client.

The replies in tests/fixtures/anthropic/*.json are stored in the Messages API's wire format (status,
headers, JSON body) and served by an `httpx2.MockTransport` under `anthropic.Anthropic`, so the SDK
parses, retries and raises exactly as it would against the real API; one test serves them from a
real loopback HTTP server reached through ANTHROPIC_BASE_URL. They were written by hand in that
format (this machine has no API access), not captured from the live service.
"""

from __future__ import annotations

import http.server
import inspect
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl
from bench_results import passing_result
from scripted_model import serve_loopback

from autokernel import reference
from autokernel.agents.base import AgentContext, AgentStop, Attempt, Proposal
from autokernel.agents.claude import (
    DEFAULT_MODEL,
    MODEL_ENV,
    ClaudeAgent,
    ClaudeConfigError,
    make_claude_agent,
)
from autokernel.agents.claude_prompt import describe_history
from autokernel.agents.claude_spend import PRICES, model_family, price_for, usage_spend
from autokernel.agents.claude_tools import (
    KernelDraft,
    ToolBox,
    ToolError,
    WorkspaceReader,
    check_kernel_source,
)
from autokernel.agents.hybrid import HybridAgent, structure_key
from autokernel.agents.tuner import TunerAgent
from autokernel.harness.result import BenchResult, Status
from autokernel.kernelfile import parse_kernel_source
from autokernel.profiling.plan import Target

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
BASE_KERNEL = (FIXTURES / "reduce_rows.py").read_text()
ROW_VECTOR_KERNEL = (FIXTURES / "reduce_row_vector.py").read_text()
OLD_LOAD = "        acc += tl.load(base + cols[None, :], mask=mask, other=0.0).to(tl.float32)\n"
EDITED_KERNEL = BASE_KERNEL.replace(
    OLD_LOAD,
    "        chunk = tl.load(base + cols[None, :], mask=mask, other=0.0,\n"
    '                        eviction_policy="evict_first")\n'
    "        acc += chunk.to(tl.float32)\n",
)
SONNET_55 = PRICES["claude-sonnet-5-5"]


# -- replay ----------------------------------------------------------------------------------


def sdk() -> Any:
    """httpx2, for tests that talk to the SDK; they skip where the SDK is not installed (the GPU
    machines), while the tests of tools, prices, prompt and playbook still run there."""
    pytest.importorskip("anthropic")
    return pytest.importorskip("httpx2")


class Cassette:
    """Serves stored HTTP exchanges in order and records every request it was sent."""

    def __init__(self, *names: str, repeat_last: bool = False) -> None:
        self.exchanges: list[dict[str, Any]] = []
        for name in names:
            self.exchanges += json.loads((FIXTURES / f"{name}.json").read_text())
        self.repeat_last = repeat_last
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._next = 0

    def next_exchange(self) -> dict[str, Any]:
        if self._next >= len(self.exchanges):
            if not self.repeat_last:
                return {"status": 500, "body": {"type": "error", "error": {
                    "type": "api_error", "message": "test cassette exhausted"}}}
            return self.exchanges[-1]
        self._next += 1
        return self.exchanges[self._next - 1]

    def record(self, path: str, headers: dict[str, str], body: bytes) -> None:
        self.paths.append(path)
        self.headers.append({k.lower(): v for k, v in headers.items()})
        self.requests.append(json.loads(body))

    def handler(self, request: Any) -> Any:
        httpx2 = sdk()
        self.record(request.url.path, dict(request.headers), request.content)
        exchange = self.next_exchange()
        if "raw" in exchange:
            return httpx2.Response(exchange["status"], headers=exchange.get("headers", {}),
                                   content=exchange["raw"].encode())
        return httpx2.Response(exchange["status"], headers=exchange.get("headers", {}),
                               json=exchange["body"])


def claude_agent(cassette: Cassette, **options: Any) -> ClaudeAgent:
    httpx2 = sdk()
    options.setdefault("failure_backoff_s", 0.0)
    options.setdefault("sleep", lambda seconds: None)
    # The cassettes are the coder's exchanges; the planner's request is tested with the scripted
    # model (tests/test_lessons_and_planner.py).
    options.setdefault("planner", False)
    return ClaudeAgent(
        api_key="sk-ant-test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(cassette.handler)),
        **options,
    )


def make_context(
    source: str = BASE_KERNEL,
    experiment: int = 1,
    history: list[Attempt] | None = None,
    workspace: str | None = None,
    best: BenchResult | None = None,
) -> AgentContext:
    target = Target(
        rank=1, kernel_type="reduce", shapes=[[4096, 4096], [1, 1 << 20]], dtype="fp16",
        calls=32, time_ms=0.42, share=0.21, bench_shape=[4096, 4096], amdahl_2x=1.12,
        cumulative_2x=1.12,
    )
    return AgentContext(
        target=target,
        device="cuda",
        gpu_summary="NVIDIA H100 80GB HBM3: 132 SMs, 3.35 TB/s HBM (measured copy 3.0 TB/s)",
        best_source=source,
        reference_source=inspect.getsource(reference.reduce),
        history=history or [Attempt(0, "starter", "baseline", latency_us=50.0,
                                    speedup_vs_eager=1.0)],
        best=best,
        experiment=experiment,
        workspace=workspace,
    )


def passing(latency_us: float, **timing_figures: Any) -> BenchResult:
    return passing_result(latency_us, kernel_type="reduce", speedup_vs_eager=50.0 / latency_us,
                          shapes=[[4096, 4096]], dtypes=["fp16"], **timing_figures)


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    content = request["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def cache_breakpoints(request: dict[str, Any]) -> int:
    return json.dumps(request).count('"cache_control"')


def expected_cost(price: Any, inp: int, out: int, read: int = 0, write: int = 0) -> float:
    return (inp * price.input + out * price.output + read * price.cache_read
            + write * price.cache_write_5m) / 1e6


# -- one experiment --------------------------------------------------------------------------


def test_tool_use_edit_is_proposed_then_kept_and_remembered() -> None:
    cassette = Cassette("edit_kept", "write_reverted")
    agent = claude_agent(cassette)

    proposal = agent.propose(make_context())
    assert proposal is not None and not proposal.error
    assert proposal.source == EDITED_KERNEL
    assert proposal.description == "stream x with evict_first loads"
    assert "L2" in proposal.hypothesis
    assert proposal.tunables == {"BLOCK_M": 4, "BLOCK_N": 64, "NUM_WARPS": 4}
    assert proposal.agent == "claude" and proposal.llm_calls == 3
    assert (proposal.cache_read_tokens, proposal.cache_write_tokens) == (5400 + 7750, 5400)
    assert proposal.input_tokens == 1210 + 2350 + 260 + 5400 + 7750 + 5400  # every prompt token
    assert proposal.output_tokens == 160 + 420 + 60
    assert proposal.cost_usd == pytest.approx(
        expected_cost(SONNET_55, 3820, 640, read=13150, write=5400))

    first, second, third = cassette.requests[:3]
    assert first["model"] == DEFAULT_MODEL
    assert {t["name"] for t in first["tools"]} == {
        "read_file", "list_files", "write_kernel", "edit_kernel", "check_kernel",
        "compile_kernel", "test_kernel"}
    assert "temperature" not in first and "tool_choice" not in first
    # The playbook and the target + reference are cached prefixes; one moving breakpoint at the
    # tail; never more than the API's 4.
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "The playbook" in first["system"][-1]["text"]
    assert first["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert all(cache_breakpoints(r) <= 4 for r in cassette.requests[:3])
    # The read_file result is the draft; the thinking block goes back with its signature.
    [read_result] = tool_results(second)
    assert read_result["content"] == BASE_KERNEL and not read_result["is_error"]
    assert second["messages"][1]["content"][0] == {
        "type": "thinking", "thinking": "The draft streams x once; check the load.",
        "signature": "EqQBCkYIBxgCKkB0cmFjZQ=="}
    [edit_result] = tool_results(third)
    assert "Static check: OK" in edit_result["content"]

    agent.observe(proposal, passing(40.0), kept=True)
    history = [Attempt(0, "starter", "baseline", latency_us=50.0),
               Attempt(1, proposal.description, "keep", latency_us=40.0, speedup_vs_eager=1.25,
                       hypothesis=proposal.hypothesis)]  # as results.tsv gives it back
    reverted = agent.propose(make_context(EDITED_KERNEL, experiment=2, history=history))
    assert reverted is not None and reverted.source == ROW_VECTOR_KERNEL
    prompt = json.dumps(cassette.requests[3])
    assert "#1 keep 1.25x eager" in prompt
    assert "hypothesis: x is read once" in prompt  # the history says why it was tried
    agent.observe(reverted, passing(45.0), kept=False)


def test_write_kernel_whole_file_with_check() -> None:
    cassette = Cassette("write_reverted")
    proposal = claude_agent(cassette).propose(make_context())
    assert proposal is not None and not proposal.error
    assert proposal.source == ROW_VECTOR_KERNEL
    assert proposal.description == "one program per row with a pipelined vector accumulator"
    write_result, check_result = tool_results(cassette.requests[1])
    assert not write_result["is_error"] and "Static check: OK" in write_result["content"]
    assert check_result["content"] == "Static check: OK."


def test_text_only_reply_is_a_failed_experiment_not_exhaustion() -> None:
    cassette = Cassette("text_only", repeat_last=True)
    agent = claude_agent(cassette, max_turns=2)
    proposal = agent.propose(make_context())
    assert proposal is not None, "no kernel this time is not 'search exhausted'"
    assert proposal.error.startswith("no kernel: Claude answered with text only")
    assert proposal.source == BASE_KERNEL and proposal.llm_calls == 2
    assert proposal.input_tokens == 2 * (1250 + 5400)
    # The second request asked for the edit explicitly.
    assert "You have not changed kernel.py" in json.dumps(cassette.requests[1]["messages"][-1])


def test_malformed_reply_is_a_failed_experiment() -> None:
    proposal = claude_agent(Cassette("malformed"), max_retries=0).propose(make_context())
    assert proposal is not None and proposal.error.startswith("malformed API reply")
    assert proposal.source == BASE_KERNEL


def test_edit_that_does_not_match_is_reported_to_the_model() -> None:
    cassette = Cassette("bad_edit_then_text")
    proposal = claude_agent(cassette, max_turns=2).propose(make_context())
    [result] = tool_results(cassette.requests[1])
    assert result["is_error"] and "does not occur in kernel.py" in result["content"]
    assert proposal is not None and proposal.error.startswith("no kernel")


def test_overloaded_then_success_retries_inside_the_sdk() -> None:
    cassette = Cassette("overloaded_then_success")
    proposal = claude_agent(cassette, max_retries=2).propose(make_context())
    assert proposal is not None and not proposal.error
    assert proposal.source == EDITED_KERNEL
    assert len(cassette.requests) == 4  # 529, 529, then the two turns
    assert proposal.llm_calls == 2  # failed attempts are neither billed nor counted


def test_only_overloaded_ends_cleanly_after_bounded_failures() -> None:
    cassette = Cassette("only_overloaded", repeat_last=True)
    waits: list[float] = []
    agent = claude_agent(cassette, max_retries=1, max_consecutive_failures=3,
                         failure_backoff_s=5.0, sleep=waits.append)
    for experiment in (1, 2, 3):
        proposal = agent.propose(make_context(experiment=experiment))
        assert proposal is not None and "overloaded (529)" in proposal.error
        assert proposal.llm_calls == 0 and proposal.cost_usd == 0.0
    with pytest.raises(AgentStop, match="API failed in 3 experiments in a row.*overloaded.*"
                                        "autokernel resume"):
        agent.propose(make_context(experiment=4))
    assert waits == [5.0, 10.0]  # backing off between experiments, doubling
    assert len(cassette.requests) == 3 * 2  # each experiment: 1 try + 1 SDK retry


def test_only_text_ends_cleanly_after_bounded_failures() -> None:
    agent = claude_agent(Cassette("text_only", repeat_last=True), max_turns=1,
                         max_consecutive_failures=2)
    assert agent.propose(make_context()).error  # type: ignore[union-attr]
    assert agent.propose(make_context(experiment=2)).error  # type: ignore[union-attr]
    with pytest.raises(AgentStop, match="Claude produced no kernel in 2 experiments in a row"
                                        ".*text only"):
        agent.propose(make_context(experiment=3))


def test_a_refused_key_stops_the_run_at_once() -> None:
    with pytest.raises(AgentStop, match="ANTHROPIC_API_KEY"):
        claude_agent(Cassette("auth_error")).propose(make_context())


def test_cost_cap_stops_before_the_call_that_would_cross_it() -> None:
    cassette = Cassette("cost_cap")
    agent = claude_agent(cassette, max_cost=0.10)
    first = agent.propose(make_context())
    assert first is not None and not first.error and first.source == EDITED_KERNEL
    per_call = expected_cost(SONNET_55, 12500, 2000)
    assert per_call == pytest.approx(0.045)
    assert first.cost_usd == pytest.approx(2 * per_call)
    with pytest.raises(AgentStop, match=r"--max-cost \$0.10 reached"):
        agent.propose(make_context(experiment=2))
    assert len(cassette.requests) == 2
    assert agent.total.cost_usd == pytest.approx(0.09)


def test_caps_count_the_whole_run_across_resume(tmp_path: Path) -> None:
    workspace = tmp_path / "run"
    workspace.mkdir()
    first_session = claude_agent(Cassette("cost_cap"), max_cost=0.10)
    assert not first_session.propose(make_context(workspace=str(workspace))).error  # type: ignore
    ledger = json.loads((workspace / ".cache" / "claude_usage.json").read_text())
    assert ledger["calls"] == 2 and ledger["cost_usd"] == pytest.approx(0.09)

    resumed = Cassette("cost_cap")
    with pytest.raises(AgentStop, match=r"--max-cost \$0.10 reached: \$0.0900 spent"):
        claude_agent(resumed, max_cost=0.10).propose(make_context(workspace=str(workspace)))
    assert resumed.requests == []
    raised = claude_agent(resumed, max_cost=0.25)  # `autokernel resume DIR --max-cost 0.25`
    assert not raised.propose(make_context(workspace=str(workspace))).error  # type: ignore
    assert json.loads((workspace / ".cache" / "claude_usage.json").read_text())["calls"] == 4
    with pytest.raises(ToolError, match="private"):
        WorkspaceReader(workspace).read(".cache/claude_usage.json")


def test_llm_call_cap_keeps_the_kernel_already_paid_for() -> None:
    cassette = Cassette("cost_cap")
    agent = claude_agent(cassette, max_llm_calls=3)
    assert agent.propose(make_context()).llm_calls == 2  # type: ignore[union-attr]
    second = agent.propose(make_context(experiment=2))
    # The cap falls between write_kernel and the closing turn: the written kernel is still tried.
    assert second is not None and not second.error
    assert second.source == ROW_VECTOR_KERNEL and second.llm_calls == 1
    with pytest.raises(AgentStop, match="--max-llm-calls 3 reached"):
        agent.propose(make_context(experiment=3))
    assert len(cassette.requests) == 3


def test_loopback_http_server_through_anthropic_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk()
    cassette = Cassette("edit_kept")

    def answer(path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        cassette.record(path, headers, body)
        exchange = cassette.next_exchange()
        return exchange["status"], exchange["body"]

    with serve_loopback(answer) as url:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loopback")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        agent = make_claude_agent(tuner_sweeps=False, max_retries=0, planner=False)
        proposal = agent.propose(make_context())
    assert proposal is not None and proposal.source == EDITED_KERNEL
    assert cassette.paths == ["/v1/messages"] * 3
    auth = cassette.headers[0].get("x-api-key", "") + cassette.headers[0].get("authorization", "")
    assert "sk-ant-loopback" in auth


# -- configuration ---------------------------------------------------------------------------


def test_model_from_flag_then_environment_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import typing

    sdk()
    from anthropic.types import Model

    known = typing.get_args(typing.get_args(Model)[0])
    assert DEFAULT_MODEL in known, "the default must be a model the installed SDK knows"
    assert price_for(DEFAULT_MODEL) is not None
    monkeypatch.delenv(MODEL_ENV, raising=False)
    assert claude_agent(Cassette()).model == DEFAULT_MODEL
    monkeypatch.setenv(MODEL_ENV, "claude-opus-5-5")
    assert claude_agent(Cassette()).model == "claude-opus-5-5"
    assert claude_agent(Cassette(), model="claude-haiku-5-5").model == "claude-haiku-5-5"


def test_setup_errors_are_one_line_config_errors(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    sdk()
    with pytest.raises(ClaudeConfigError, match="no price is known"):
        claude_agent(Cassette(), model="my-gateway-model", max_cost=5.0)
    with pytest.raises(ClaudeConfigError, match="must be positive"):
        claude_agent(Cassette(), max_llm_calls=0)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE",
                 "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_IDENTITY_TOKEN",
                 "ANTHROPIC_IDENTITY_TOKEN_FILE", "ANTHROPIC_FEDERATION_RULE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no profile on disk either
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    with pytest.raises(ClaudeConfigError, match="set ANTHROPIC_API_KEY"):
        ClaudeAgent()
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "nowhere"))  # a broken profile
    with pytest.raises(ClaudeConfigError, match="set ANTHROPIC_API_KEY"):
        ClaudeAgent()


def test_agent_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk()
    from autokernel.agents import make_agent, resolve_agent_name

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert resolve_agent_name("auto")[0] == "claude"
    agent = make_agent("claude", seed=3, model="claude-opus-5-5", max_cost=2.5, max_llm_calls=9)
    assert isinstance(agent, HybridAgent) and isinstance(agent.llm, ClaudeAgent)
    assert (agent.model, agent.max_cost, agent.max_llm_calls) == ("claude-opus-5-5", 2.5, 9)
    assert agent.tuner.seed == 3
    # Behind a gateway, a bearer token is enough for an explicit --agent claude.
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "gateway-token")
    assert resolve_agent_name("claude")[0] == "claude"
    assert make_agent("claude", tuner_sweeps=False)._client.auth_token == "gateway-token"


def test_retries_and_timeouts_of_the_client() -> None:
    client = claude_agent(Cassette())._client
    assert client.max_retries == 5
    assert (client.timeout.read, client.timeout.connect) == (600.0, 15.0)
    quick = claude_agent(Cassette(), max_retries=1, timeout=5.0)._client
    assert quick.max_retries == 1 and (quick.timeout.read, quick.timeout.connect) == (5.0, 5.0)


def test_without_the_sdk_the_agent_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "anthropic", None)  # as on the GPU machines
    with pytest.raises(ClaudeConfigError, match="needs the anthropic package"):
        ClaudeAgent(api_key="sk-ant-test")


def test_unknown_model_counts_tokens_but_reports_cost_unknown() -> None:
    class Usage:
        input_tokens, output_tokens = 1000, 200
        cache_read_input_tokens, cache_creation_input_tokens = 50, 0
        cache_creation = None

    spend = usage_spend("gateway-llm-7", Usage())
    assert (spend.input_tokens, spend.output_tokens, spend.cache_read_tokens) == (1000, 200, 50)
    assert spend.unpriced_calls == 1 and spend.cost_or_none is None
    # A request served by another model than asked for is billed at the serving model's rates.
    served = usage_spend("claude-opus-4-8", Usage(), fallback_model=DEFAULT_MODEL)
    assert served.cost_usd == pytest.approx(expected_cost(PRICES["claude-opus-4-8"], 1000, 200, 50))
    fallback = usage_spend("gateway-llm-7", Usage(), fallback_model=DEFAULT_MODEL)
    assert fallback.cost_usd == pytest.approx(expected_cost(SONNET_55, 1000, 200, 50))


def test_prices_by_family_and_long_prompt_band() -> None:
    assert model_family("us.anthropic.claude-opus-4-5-20251101-v1:0") == "claude-opus-4-5"
    assert model_family("claude-haiku-4-5@20251001") == "claude-haiku-4-5"
    assert model_family("claude-sonnet-5-5[1m]") == "claude-sonnet-5-5"
    assert price_for("claude-opus-5") is not price_for("claude-opus-5-5")

    class Usage:
        def __init__(self, inp: int, write: int, write_1h: int = 0) -> None:
            self.input_tokens, self.output_tokens = inp, 1000
            self.cache_read_input_tokens, self.cache_creation_input_tokens = 0, write
            self.cache_creation = type("C", (), {"ephemeral_1h_input_tokens": write_1h})()

    haiku = PRICES["claude-haiku-5-5"]
    short = usage_spend("claude-haiku-5-5", Usage(90_000, 0))
    long = usage_spend("claude-haiku-5-5", Usage(90_000, 20_000))
    assert short.cost_usd == pytest.approx(expected_cost(haiku, 90_000, 1000))
    assert long.cost_usd == pytest.approx(
        expected_cost(haiku.long_prompt, 90_000, 1000, write=20_000))
    one_hour = usage_spend("claude-sonnet-5-5", Usage(0, 10_000, write_1h=4_000))
    assert one_hour.cost_usd == pytest.approx(
        (6_000 * SONNET_55.cache_write_5m + 4_000 * SONNET_55.cache_write_1h
         + 1000 * SONNET_55.output) / 1e6)


# -- tools -----------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "kernels").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "reference.py").write_text("def reduce(x):\n    return x.sum(-1)\n")
    (root / "kernels" / "01_rmsnorm.py").write_text("KERNEL_TYPE = 'rmsnorm'\n")
    (root / "kernel.py").write_text("stale copy on disk\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    return root


def test_reads_stay_inside_the_workspace(workspace: Path) -> None:
    reader = WorkspaceReader(workspace, {"kernel.py": "draft\n"})
    assert reader.read("reference.py").startswith("def reduce")
    assert reader.read("./kernels/01_rmsnorm.py") == "KERNEL_TYPE = 'rmsnorm'\n"
    assert reader.read("kernel.py") == "draft\n"  # the draft, not the file on disk
    for path, why in [("../secret.txt", "outside the workspace"),
                      (str(workspace.parent / "secret.txt"), "absolute paths"),
                      ("escape", "outside the workspace"),
                      ("kernels/../../secret.txt", "outside the workspace"),
                      (".git/config", "private"),
                      ("missing.py", "no such file")]:
        with pytest.raises(ToolError, match=why):
            reader.read(path)
    listing = reader.list(".")
    assert "kernels/" in listing and "reference.py" in listing and ".git" not in listing
    with pytest.raises(ToolError, match="outside"):
        reader.list("..")


def test_read_file_pages_long_files(workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    page = WorkspaceReader(workspace).read("long.txt", start_line=10, max_lines=5)
    assert page.startswith("line 10\n") and "line 15" not in page
    assert "continue with start_line=15" in page


def test_edit_must_match_exactly_once() -> None:
    draft = KernelDraft(original=BASE_KERNEL, kernel_type="reduce")
    with pytest.raises(ToolError, match="does not occur"):
        draft.edit("BLOCK_M = 99", "BLOCK_M = 2", "x", "y")
    with pytest.raises(ToolError, match="occurs 2 times"):
        draft.edit("rows.stride(", "rows.size(", "x", "y")
    assert not draft.changed
    draft.edit(OLD_LOAD, OLD_LOAD.replace("other=0.0", "other=0.0, cache_modifier='.cg'"),
               "bypass L1", "streaming")
    assert draft.changed and draft.description == "bypass L1"


def test_suggested_configs_keep_points_of_the_space_and_reach_the_proposal() -> None:
    draft = KernelDraft(original=BASE_KERNEL, kernel_type="reduce")
    box = ToolBox(draft, WorkspaceReader(None, {"kernel.py": BASE_KERNEL}))
    text, is_error = box.run("edit_kernel", {
        "old": "BLOCK_M = 4\n", "new": "BLOCK_M = 2\n", "description": "d", "hypothesis": "h",
        "suggested_configs": [{"BLOCK_M": 8, "NUM_WARPS": 4}, {"BLOCK_N": 96}, "x",
                              {"BLOCK_M": 8, "NUM_WARPS": 4}, {"BLOCK_N": 128}]})
    assert not is_error
    assert draft.suggested_configs == [{"BLOCK_M": 8, "NUM_WARPS": 4}, {"BLOCK_N": 128}]
    assert "dropped 2" in text and "BLOCK_N=96 is not in TUNABLE_SPACE" in text
    too_many = [{"BLOCK_M": m, "BLOCK_N": n} for m in (1, 2, 4) for n in (32, 64)]
    text, _ = box.run("edit_kernel", {"old": "BLOCK_M = 2\n", "new": "BLOCK_M = 1\n",
                                      "suggested_configs": too_many})
    assert len(draft.suggested_configs) == 5 and "more than 5" in text
    assert box.run("write_kernel", {"source": BASE_KERNEL, "description": "d", "hypothesis": "h",
                                    "suggested_configs": {"BLOCK_M": 1}})[1] is True


def test_toolbox_reports_bad_calls_as_errors_not_exceptions() -> None:
    draft = KernelDraft(original=BASE_KERNEL, kernel_type="reduce")
    box = ToolBox(draft, WorkspaceReader(None, {"kernel.py": BASE_KERNEL}))
    assert box.run("write_kernel", {"description": "x"}) == (
        "write_kernel needs the complete kernel.py in `source`", True)
    text, is_error = box.run("run_shell", {"cmd": "ls"})
    assert is_error and "unknown tool" in text
    text, is_error = box.run("read_file", {"path": "reference.py"})
    assert is_error and "no workspace directory" in text
    text, is_error = box.run("read_file", {"path": "kernel.py", "start_line": "abc"})
    assert is_error and "bad arguments" in text


def test_static_check_catches_what_the_harness_would_reject() -> None:
    assert check_kernel_source(BASE_KERNEL, "reduce") == []
    assert "this target is 'softmax'" in check_kernel_source(BASE_KERNEL, "softmax")[0]
    two_args = BASE_KERNEL.replace("def kernel_fn(x):", "def kernel_fn(x, scale):")
    assert "requires 2 arguments; the reference is reduce(x, axis, op)" in check_kernel_source(
        two_args, "reduce")[0]
    off_space = BASE_KERNEL.replace("BLOCK_N = 64\n", "BLOCK_N = 96\n")
    assert "not one of its TUNABLE_SPACE values" in check_kernel_source(off_space, "reduce")[0]
    assert "syntax error" in check_kernel_source("def kernel_fn(:\n", "reduce")[0]
    escaping = BASE_KERNEL.replace("import torch\n", "import os\nimport torch\n")
    assert any("[import-not-allowed]" in p for p in check_kernel_source(escaping, "reduce"))
    # A last-dim sum kernel may leave out the reference's later trailing arguments (axis, op).
    with_axis = BASE_KERNEL.replace("def kernel_fn(x):", "def kernel_fn(x, axis=-1):")
    assert check_kernel_source(with_axis, "reduce") == []


# -- prompt ----------------------------------------------------------------------------------


def test_prompt_has_what_the_agent_needs_and_stays_bounded() -> None:
    history = [Attempt(0, "starter", "baseline", latency_us=50.0)]
    history += [Attempt(i, f"idea {i}", "revert", latency_us=55.0) for i in range(1, 400)]
    history.append(Attempt(400, "tuner: BLOCK_N=128", "revert", latency_us=51.0,
                           tunables={"BLOCK_N": 128}))
    history.append(Attempt(401, "tuner: BLOCK_N=32", "fail", stage="correctness",
                           reason="max error 3.2 at [1, 1048576] fp16 " + "x" * 5000,
                           tunables={"BLOCK_N": 32}))
    history.append(Attempt(402, "split rows", "crash", stage="compile", reason="out of resources"))
    best = passing(40.0, pct_peak_measured=71.0, throughput=2100.0, throughput_unit="GB/s")
    cassette = Cassette("write_reverted")
    claude_agent(cassette, history_limit=30).propose(
        make_context(history=history, experiment=403, best=best))
    prompt = "\n".join(b["text"] for b in cassette.requests[0]["messages"][0]["content"])
    for needed in ("# Target: reduce", "benchmarked shape", "fp16", "memory-bound",
                   "def reduce(x", "BLOCK_M = 4", "TUNABLE_SPACE", "H100", "71% of the measured",
                   "1.25x vs PyTorch eager", "# Experiment 403", "#402 crash", "stage compile",
                   "#400-#401 tuner sweep: 2 configurations", "fastest 51.0us [BLOCK_N=128]"):
        assert needed in prompt, needed
    assert "idea 5:" not in prompt  # older attempts are summarized, not listed
    assert "403 experiments" in prompt
    assert "x" * 300 not in prompt  # errors are cut to a line, never raw logs
    assert len(describe_history(history, 30).splitlines()) <= 30 + 12


def test_workspace_program_md_overrides_the_packaged_one(workspace: Path) -> None:
    (workspace / "program.md").write_text("# my own rules: only tune softmax\n")
    cassette = Cassette("write_reverted")
    claude_agent(cassette).propose(make_context(workspace=str(workspace)))
    assert "only tune softmax" in cassette.requests[0]["system"][-1]["text"]


# -- hybrid with the tuner -------------------------------------------------------------------


def test_structure_key_ignores_tunable_values_only() -> None:
    key = structure_key(BASE_KERNEL)
    assert key is not None
    retuned = BASE_KERNEL.replace("BLOCK_N = 64\n", "BLOCK_N = 128\n")
    assert structure_key(retuned) == key
    assert structure_key(EDITED_KERNEL) != key
    assert structure_key("KERNEL_TYPE = 'reduce'\nBACKEND = 'triton'\nkernel_fn = None\n") is None


class FakeHarness:
    """Deterministic verdicts from the tunables, so keep/revert is known in advance."""

    def __init__(self) -> None:
        self.best_latency = 50.0

    def __call__(self, proposal: Proposal) -> tuple[BenchResult, bool]:
        info = parse_kernel_source(proposal.source)
        t = info.tunables
        if t.get("BLOCK_N") == 32:
            return BenchResult(status=Status.FAIL, stage="correctness", reason="wrong"), False
        latency = 30.0 + 1000.0 / t["BLOCK_N"] + 2.0 * t.get("NUM_WARPS", 1)
        latency -= 5.0 if "evict_first" in proposal.source else 0.0
        kept = latency < self.best_latency * 0.99
        if kept:
            self.best_latency = latency
        return passing(latency), kept


def test_hybrid_sweeps_each_new_structure_with_the_tuner_not_the_llm() -> None:
    cassette = Cassette("edit_kept", "write_reverted", "text_only", repeat_last=True)
    llm = claude_agent(cassette, max_turns=3, max_consecutive_failures=2)
    hybrid = HybridAgent(llm, TunerAgent(seed=3), sweep_patience=3, max_sweep_experiments=6)
    harness = FakeHarness()
    best_source = BASE_KERNEL
    history = [Attempt(0, "starter", "baseline", latency_us=50.0,
                       tunables=parse_kernel_source(BASE_KERNEL).tunables)]
    log: list[tuple[str, bool, int, str]] = []  # (agent, sweep, LLM requests so far, source)
    for experiment in range(1, 60):
        try:
            proposal = hybrid.propose(make_context(best_source, experiment, list(history)))
        except AgentStop:
            break
        if proposal is None:
            # Claude only answers with text once the cassette's edits are used up: the tuner
            # carries on alone until its search of the best is exhausted.
            assert hybrid.handover_note.startswith("the LLM was handed over to the tuner")
            break
        log.append((proposal.agent, proposal.sweep, len(cassette.requests), proposal.source))
        if proposal.error:
            history.append(Attempt(experiment, proposal.description, "fail", stage="agent",
                                   reason=proposal.error))
            continue
        result, kept = harness(proposal)
        hybrid.observe(proposal, result, kept)
        status = "keep" if kept else ("revert" if result.passed else "fail")
        history.append(Attempt(experiment, proposal.description, status,
                               latency_us=result.latency_us, tunables=proposal.tunables))
        if kept:
            best_source = proposal.source

    agents = [entry[0] for entry in log]
    llm_turns = [i for i, a in enumerate(agents) if a == "claude"]
    assert len(llm_turns) >= 3, agents
    first, second, third = llm_turns[:3]
    # A new target starts with a sweep of the starter, before any LLM call.
    assert first >= 2 and all(a == "tuner" for a in agents[:first])
    assert log[first - 1][2] == 0
    # Claude's kept edit is swept next, with no LLM request during the sweep.
    assert second - first >= 2
    for agent, sweep, requests, source in log[first + 1:second]:
        assert agent == "tuner" and sweep and requests == log[first][2]
        assert structure_key(source) == structure_key(EDITED_KERNEL)
    # Claude's rewrite is slower than the best, yet its structure is swept on its own source.
    for agent, sweep, requests, source in log[second + 1:third]:
        assert agent == "tuner" and requests == log[second][2]
        assert structure_key(source) == structure_key(ROW_VECTOR_KERNEL)
    assert third - second >= 2
    assert not any(sweep for agent, sweep, _, _ in log if agent == "claude")
    # The best kernel is a swept configuration of one of Claude's structures, better than any
    # configuration Claude itself wrote.
    claude_latencies = [FakeHarness()(Proposal(log[i][3], ""))[0].latency_us
                        for i in (first, second)]
    assert best_source in {src for agent, sweep, _, src in log if sweep}
    assert structure_key(best_source) != structure_key(BASE_KERNEL)
    assert harness.best_latency < min(claude_latencies)


# -- the playbook ----------------------------------------------------------------------------

PROGRAM = Path(__file__).resolve().parents[1] / "autokernel" / "agents" / "program.md"


def _resolve_triton_name(dotted: str) -> Any:
    import importlib

    import triton
    import triton.language as tl

    parts = dotted.split(".")
    obj: Any = tl if parts[0] == "tl" else triton
    module = "triton.language" if parts[0] == "tl" else "triton"
    for part in parts[1:]:
        module += "." + part
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module(module)  # a submodule not imported yet
    return obj


def program_names() -> list[str]:
    return sorted(set(re.findall(r"\b(?:tl|triton)(?:\.[A-Za-z_]\w*)+", PROGRAM.read_text())))


def test_every_triton_name_in_program_md_exists() -> None:
    names = program_names()
    assert len(names) > 25 and "tl.make_tensor_descriptor" in names
    missing = []
    for name in names:
        try:
            _resolve_triton_name(name)
        except (AttributeError, ImportError):
            missing.append(name)
    assert not missing, f"program.md names Triton APIs that do not exist: {missing}"


def test_program_md_keyword_arguments_exist() -> None:
    calls = re.findall(r"`((?:tl|triton)(?:\.\w+)+)\(([^`]*)\)`", PROGRAM.read_text())
    checked = 0
    for name, arguments in calls:
        keywords = re.findall(r"\b([A-Za-z_]\w*)=(?!=)", arguments)
        if not keywords:
            continue
        parameters = inspect.signature(_resolve_triton_name(name)).parameters
        for keyword in keywords:
            assert keyword in parameters, f"{name} has no argument {keyword!r}"
            checked += 1
    assert checked >= 4


def test_a_nonexistent_name_would_be_caught() -> None:
    with pytest.raises((AttributeError, ImportError)):
        _resolve_triton_name("tl.prefetch")
    assert "tl.prefetch" not in program_names()


def test_program_md_covers_the_playbook_and_ships_in_the_package() -> None:
    from autokernel.agents import PROGRAM_PATH

    assert PROGRAM_PATH.resolve() == PROGRAM.resolve()
    text = PROGRAM.read_text().lower()
    for topic in ("the loop's rules", "cheating", "tier 1", "tier 2", "coalescing", "vector width",
                  "l2 swizzle", "tier 3", "tensor cores", "accumulation precision",
                  "epilogue fusion", "tier 4", "split-k", "persistent", "warp specialization",
                  "tma", "hopper", "ampere", "ada", "online softmax", "welford",
                  "flash_attention", "cross_entropy", "rotary", "cuda c++", "launcher convention",
                  "__shfl_xor_sync", "bank conflicts", "wmma", "wgmma", "cp_async_bulk_tensor",
                  "__launch_bounds__"):
        assert topic in text, topic
    pyproject = (PROGRAM.parents[2] / "pyproject.toml").read_text()
    assert '"agents/*.md"' in pyproject


def test_agent_module_does_not_import_anthropic_at_import_time() -> None:
    import subprocess
    import sys

    code = ("import sys, autokernel.agents.claude, autokernel.agents.hybrid, "
            "autokernel.agents.claude_loop, autokernel.agents.claude_errors; "
            "sys.exit(1 if 'anthropic' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.fixture(autouse=True)
def _no_stray_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("AUTOKERNEL_CLAUDE_EFFORT", raising=False)
    yield


# -- the whole loop, on the CPU interpreter ---------------------------------------------------

# The starter walks each row in 32-column chunks: in the interpreter every chunk costs a loop
# iteration, so Claude's replayed edit (one chunk per row) is ~8x faster and is kept for sure, and
# its replayed rewrite (64-wide chunks, one program per row) is ~4x slower and is reverted.
SLOW_STARTER = BASE_KERNEL.replace("BLOCK_M = 4\nBLOCK_N = 64\n", "BLOCK_M = 1\nBLOCK_N = 32\n")
LOOP_SHAPE = [16, 256]


def night_plan() -> Any:
    from autokernel.profiling.plan import Plan

    target = Target(rank=1, kernel_type="reduce", shapes=[LOOP_SHAPE], dtype="fp32", calls=4,
                    time_ms=0.5, share=0.5, bench_shape=LOOP_SHAPE, amdahl_2x=1.33,
                    cumulative_2x=1.33)
    return Plan(model="model.py", class_name="Model", device="cpu", dtype="fp32", gpu=None,
                total_ms=1.0, targets=[target])


@pytest.mark.slow
def test_full_claude_loop_on_the_cpu_interpreter(tmp_path: Path) -> None:
    import functools
    import io
    import subprocess

    from autokernel.harness.runner import run_bench
    from autokernel.loop.dashboard import PlainDashboard
    from autokernel.loop.results import ResultsLog, read_rows
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.runner import Runner
    from autokernel.loop.state import RunState, TargetState
    from autokernel.loop.workspace import BRANCH_PREFIX, Workspace
    from autokernel.orchestrate import MoveOnConfig

    assert SLOW_STARTER != BASE_KERNEL
    plan = night_plan()
    model = tmp_path / "model.py"
    model.write_text("# the model\n")
    ws = Workspace.create(tmp_path / "run", run_tag="night-1", run_info={"config": {}},
                          plan_json=json.dumps(plan.to_dict()), model_path=model,
                          program_md=PROGRAM.read_text(),
                          reference_source=Path(reference.__file__).read_text())
    state = RunState(run_tag="night-1", branch=BRANCH_PREFIX + "night-1", head=ws.head(),
                     targets=[TargetState(index=0, rank=1, kernel_type="reduce", tag="01_reduce")],
                     hours=None)
    ResultsLog.create(ws.results_path)
    state.save(ws.state_path)
    config = LoopConfig(device="cpu", dtype="fp32", agent="claude", hours=None, revisit=False,
                        bench_timeout_s=300.0,
                        move_on=MoveOnConfig(max_consecutive_reverts=5, peak_fraction=None,
                                             target_seconds=None, target_speedup=None))
    cassette = Cassette("loop_night")
    llm = claude_agent(cassette, max_turns=2, max_llm_calls=6)
    agent = HybridAgent(llm, TunerAgent(seed=1), sweep_patience=1, max_sweep_experiments=1,
                        initial_sweep=False)
    log = io.StringIO()
    # The real judge, its correctness stages cut to the smoke case (then the timing, which the
    # keep and the revert rest on): this test is about the agent's loop; the stages are judged in
    # the harness tests, and the slow starter made them most of this test's time.
    runner = Runner(ws, plan, state, config, agent,
                    bench=functools.partial(run_bench, quick=True, only_stages=["smoke"]),
                    dashboard=PlainDashboard(stream=log), starter_source=lambda kind: SLOW_STARTER)

    reason = runner.run()

    assert "the agent stopped: --max-llm-calls 6 reached" in reason, log.getvalue()
    rows = read_rows(ws.results_path)
    summary = [(r["experiment"], r["status"], r["agent"], r["stage"]) for r in rows]
    assert [r["status"] for r in rows][:2] == ["baseline", "keep"], summary
    assert [r["agent"] for r in rows] == ["starter", "claude", "tuner", "claude", "tuner",
                                          "claude"], summary
    assert rows[3]["status"] == "revert", summary
    assert rows[5]["status"] == "fail" and rows[5]["stage"] == "agent", summary
    assert rows[5]["correctness"] == "ERROR" and "text only" in rows[5]["reason"]
    # Tokens and cost per experiment; the tuner's sweep steps cost nothing.
    assert int(rows[1]["input_tokens"]) == 1400 + 6100 + 450 + 7500
    assert int(rows[1]["output_tokens"]) == 350 + 40 and float(rows[1]["cost_usd"]) > 0
    assert rows[2]["input_tokens"] == "0" and rows[4]["input_tokens"] == "0"
    assert int(rows[5]["input_tokens"]) == 1600 + 6100 + 1700 + 7700
    spent = sum(float(r["cost_usd"] or 0) for r in rows)
    assert spent == pytest.approx(llm.total.cost_usd)
    ledger = json.loads((ws.cache_dir / "claude_usage.json").read_text())
    assert ledger["calls"] == 6 and ledger["cost_usd"] == pytest.approx(spent)
    # git: the keep is a commit saying what was tried; the finished target's best is saved.
    subjects = subprocess.run(["git", "-C", str(ws.root), "log", "--format=%s"], check=True,
                              capture_output=True, text=True).stdout
    assert "exp 1 01_reduce: one chunk per row: BLOCK_N covers the whole row" in subjects
    assert "exp 3 " not in subjects  # reverted, not committed
    best = (ws.root / "kernels" / "01_reduce.py").read_text()
    assert "triton.next_power_of_2(n_cols))" in best
    assert ws.read_kernel() == best
    runner.check_consistency()


class _UselessAPI(http.server.BaseHTTPRequestHandler):
    """Stands in for an API that is only ever overloaded, or only ever answers in prose."""

    answer = "overloaded"
    requests: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests.append(self.path)
        if self.answer == "overloaded":
            status, headers = 529, {"retry-after-ms": "1"}
            body: dict[str, Any] = {"type": "error", "error": {"type": "overloaded_error",
                                                               "message": "Overloaded"}}
        else:
            status, headers = 200, {}
            body = {"id": "msg_01Prose", "type": "message", "role": "assistant",
                    "model": "claude-sonnet-5-5", "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": "This kernel is already optimal."}],
                    "usage": {"input_tokens": 900, "output_tokens": 12}}
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json",
                            "Content-Length": str(len(payload)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["overloaded", "text"])
def test_a_useless_api_hands_the_rest_of_the_run_to_the_tuner(
        answer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    from typer.testing import CliRunner

    sdk()
    import autokernel.agents.claude as claude_module
    from autokernel.cli import app
    from autokernel.loop.results import read_rows

    handler = type("Handler", (_UselessAPI,), {"answer": answer, "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loopback")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    # Only the waiting is shortened (and the starter's initial tuner sweep skipped); everything
    # else is what `autokernel run --agent claude` builds.
    monkeypatch.setattr(claude_module, "make_claude_agent", functools.partial(
        claude_module.make_claude_agent, failure_backoff_s=0.0, initial_sweep=False))
    plan_path, model = tmp_path / "plan.json", tmp_path / "model.py"
    night_plan().save(plan_path)
    model.write_text("# the model\n")
    out = tmp_path / "run"
    try:
        result = CliRunner().invoke(app, [
            "run", str(model), "--plan", str(plan_path), "--device", "cpu", "--agent", "claude",
            "--out", str(out), "--no-live", "--top", "1", "--max-experiments-per-target", "6"])
    finally:
        server.shutdown()
        server.server_close()

    output = result.output
    flat = " ".join(output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output
    assert result.exit_code == 0, output
    why = "overloaded (529)" if answer == "overloaded" else "text only"
    stop = ("the Claude API failed in 4 experiments in a row" if answer == "overloaded"
            else "Claude produced no kernel in 4 experiments in a row")
    # Said once when it happens, and again at the run's end, which is not "the agent stopped".
    assert flat.count("the offline tuner carries on alone") == 1, output
    assert "the agent stopped" not in flat, output
    assert re.search(r"stopped: .*; the LLM was handed over to the tuner at experiment 5 \("
                     + re.escape(stop) + r".*\(last: .*" + re.escape(why), flat), output
    rows = read_rows(out / "results.tsv")
    assert [r["status"] for r in rows][:5] == ["baseline"] + ["fail"] * 4
    assert all(r["stage"] == "agent" and why in r["reason"] for r in rows[1:5])
    label = "claude: no candidate (API failure)" if answer == "overloaded" else \
        "claude: no kernel in the reply"
    assert all(r["description"] == label for r in rows[1:5])
    # The tuner's experiments follow, real harness runs of the current best's tunables.
    tuner_rows = rows[5:]
    assert tuner_rows and all(r["agent"] == "tuner" and r["description"].startswith("tuner: ")
                              and r["stage"] != "agent" for r in tuner_rows), rows
    assert json.loads((out / "state.json").read_text())["finished"] is True
    # Prose replies were billed and are summed up at the end; failed 529 requests were not.
    assert bool(re.search(r"LLM usage: \d+ LLM calls", flat)) == (answer == "text"), output
    assert handler.requests and set(handler.requests) == {"/v1/messages"}


# -- the playbook's advice, run: the interpreter here, compiled on a GPU -----------------------


@triton.jit
def streamed_exp(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = tl.max_contiguous(tl.multiple_of(offsets, BLOCK), BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0, eviction_policy="evict_first",
                cache_modifier=".cg")
    tl.store(y_ptr + offsets, tl.exp2(x * 1.4426950408889634), mask=mask)


@triton.jit
def pipelined_row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * n_cols + cols, mask=cols < n_cols,
                       other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def grouped_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tl.swizzle2d(tl.program_id(0), tl.program_id(1), tl.num_programs(0),
                                tl.num_programs(1), GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :],
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :],
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def tma_double(in_desc, out_desc, BM: tl.constexpr):
    tile = in_desc.load([tl.program_id(0) * BM, 0])
    out_desc.store([tl.program_id(0) * BM, 0], tile * 2)


def test_playbook_idioms_run(device: str) -> None:
    """The APIs and arguments program.md recommends, in small kernels checked against torch.

    On the CPU this checks what they mean, in the interpreter; on a GPU machine (where the SDK
    tests skip) it checks that Triton 3.6 compiles them for that GPU, TMA included on Hopper.
    """
    import torch

    torch.manual_seed(0)
    x = torch.randn(1000, device=device)
    y = torch.empty_like(x)
    streamed_exp[(triton.cdiv(1000, 256),)](x, y, 1000, BLOCK=256)
    torch.testing.assert_close(y, torch.exp(x), rtol=1e-5, atol=1e-5)

    rows = torch.randn(5, 300, device=device)
    sums = torch.empty(5, device=device)
    pipelined_row_sum[(5,)](rows, sums, 300, BLOCK=64, STAGES=3)
    torch.testing.assert_close(sums, rows.sum(-1), rtol=1e-4, atol=1e-4)

    a, b = torch.randn(40, 24, device=device), torch.randn(24, 36, device=device)
    c = torch.empty(40, 36, device=device)
    grid = (triton.cdiv(40, 16), triton.cdiv(36, 16))
    grouped_matmul[grid](a, b, c, 40, 36, 24, BM=16, BN=16, BK=16, GROUP_M=2)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)

    capability = torch.cuda.get_device_capability() if device == "cuda" else (9, 0)
    if capability < (9, 0):
        return  # TMA descriptors are the Hopper-and-newer advice
    from triton.tools.tensor_descriptor import TensorDescriptor

    src = torch.randn(64, 32, device=device)
    dst = torch.empty_like(src)
    tma_double[(64 // 16,)](TensorDescriptor.from_tensor(src, [16, 32]),
                            TensorDescriptor.from_tensor(dst, [16, 32]), BM=16)
    torch.testing.assert_close(dst, src * 2)
