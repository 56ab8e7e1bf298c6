"""The Claude agent's spend: list prices, each response's tokens and dollars, and the run's caps.

Every request's usage (input, output, cache read and write tokens) is priced from `PRICES`, at the
model that served it. `--max-cost` and `--max-llm-calls` are checked before each request and cap
the whole run: the spend so far is kept in the workspace (`.cache/claude_usage.json`, which reverts
never touch), so a resumed run goes on counting from there.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autokernel.agents.claude_errors import ClaudeConfigError
from autokernel.files import atomic_write_text

LEDGER_FILE = ".cache/claude_usage.json"  # the workspace's .cache/ survives reverts and resume


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Long prompts (input + cache reads + writes above the threshold)
    are billed at `long_prompt` rates on every token of that request, output included."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    long_prompt_threshold: int | None = None
    long_prompt: Price | None = None


PRICES_SOURCE = (
    "Anthropic's pricing page and model overview pages (platform.claude.com/docs/en/about-claude/"
    "pricing, .../models/<model>/overview), list prices read on 2026-11-21"
)
_OPUS_4X = Price(5.0, 25.0, 6.25, 10.0, 0.50)
_SONNET_4X = Price(3.0, 15.0, 3.75, 6.0, 0.30)
PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(8.0, 40.0, 10.0, 16.0, 0.20),
    "claude-fable-5-1": Price(10.0, 50.0, 12.50, 20.0, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.50, 20.0, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.50, 20.0, 1.00),
    "claude-mythos-5": Price(10.0, 50.0, 12.50, 20.0, 1.00),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 8.0, 0.20),
    "claude-opus-5": _OPUS_4X,
    "claude-opus-4-8": _OPUS_4X,
    "claude-opus-4-7": _OPUS_4X,
    "claude-opus-4-6": _OPUS_4X,
    "claude-opus-4-5": _OPUS_4X,
    # Sonnet 5.5 cache reads went from $0.20 to $0.10 on 2026-10-07.
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.50, 4.0, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.50, 4.0, 0.20),
    "claude-sonnet-4-6": _SONNET_4X,
    "claude-sonnet-4-5": _SONNET_4X,
    "claude-haiku-5-5": Price(
        0.10, 0.50, 0.125, 0.20, 0.01,
        long_prompt_threshold=100_000,
        long_prompt=Price(0.50, 2.50, 0.625, 1.00, 0.05),
    ),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 2.0, 0.10),
}


def model_family(model: str) -> str:
    """'us.anthropic.claude-opus-4-5-20251101-v1:0' -> 'claude-opus-4-5' (provider and date off)."""
    name = model.strip().lower()
    name = name[name.find("claude-"):] if "claude-" in name else name
    name = re.sub(r"\[[^\]]*\]$", "", name)  # "[1m]" context-window suffixes
    name = re.sub(r"-v\d+(:\d+)?$", "", name)  # Bedrock "-v1:0"
    name = re.sub(r"[@-]\d{8}$", "", name)  # dated snapshots, Vertex "@20251101"
    return name


def price_for(model: str) -> Price | None:
    return PRICES.get(model_family(model))


@dataclass
class Spend:
    """Tokens and dollars of some LLM calls. `cost_usd` covers the priced calls only."""

    input_tokens: int = 0  # uncached input
    output_tokens: int = 0  # thinking included
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def add(self, other: Spend) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def prompt_tokens(self) -> int:
        """Every input token processed: uncached, read from the cache, and written to it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spend:
        spend = cls()
        for name in cls.__dataclass_fields__:
            value = data.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(spend, name, type(getattr(spend, name))(value))
        return spend

    @property
    def cost_or_none(self) -> float | None:
        """The cost when every call was priced, else None (unknown)."""
        return None if self.unpriced_calls else self.cost_usd

    def describe(self) -> str:
        cost = f"${self.cost_usd:.2f}" + (
            f" + {self.unpriced_calls} unpriced calls" if self.unpriced_calls else ""
        )
        return (
            f"{self.calls} LLM calls, {self.input_tokens:,} input + {self.cache_read_tokens:,} "
            f"cache-read + {self.cache_write_tokens:,} cache-write + {self.output_tokens:,} output "
            f"tokens, {cost}"
        )


def usage_spend(model: str, usage: Any, fallback_model: str | None = None) -> Spend:
    """Tokens and cost of one Messages API response's `usage`.

    Priced at the model that served the request (a gateway or a safety reroute may serve another
    than the one asked for), falling back to the requested model's price when that one is unknown.
    """
    def count(name: str) -> int:
        value = getattr(usage, name, None) if usage is not None else None
        return int(value) if isinstance(value, (int, float)) else 0

    spend = Spend(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
        calls=1,
    )
    price = price_for(model) or (price_for(fallback_model) if fallback_model else None)
    if price is None:
        spend.unpriced_calls = 1
        return spend
    prompt = spend.input_tokens + spend.cache_read_tokens + spend.cache_write_tokens
    if price.long_prompt and price.long_prompt_threshold and prompt > price.long_prompt_threshold:
        price = price.long_prompt
    breakdown = getattr(usage, "cache_creation", None)
    write_1h = int(getattr(breakdown, "ephemeral_1h_input_tokens", 0) or 0) if breakdown else 0
    write_5m = max(spend.cache_write_tokens - write_1h, 0)
    spend.cost_usd = (
        spend.input_tokens * price.input
        + spend.output_tokens * price.output
        + spend.cache_read_tokens * price.cache_read
        + write_5m * price.cache_write_5m
        + write_1h * price.cache_write_1h
    ) / 1e6
    return spend


# The running total of each run's ledger opened in this process, by the ledger's path.
_RUN_TOTALS: dict[str, Spend] = {}


class RunBudget:
    """The run's LLM spend against its caps, saved in the workspace after every call."""

    def __init__(self, model: str, max_cost: float | None, max_llm_calls: int | None) -> None:
        if max_cost is not None and max_cost <= 0:
            raise ClaudeConfigError(f"--max-cost must be positive; got {max_cost}")
        if max_llm_calls is not None and max_llm_calls <= 0:
            raise ClaudeConfigError(f"--max-llm-calls must be positive; got {max_llm_calls}")
        if max_cost is not None and price_for(model) is None:
            raise ClaudeConfigError(
                f"no price is known for model {model!r}, so --max-cost cannot be enforced; "
                f"use --max-llm-calls, or a model of: {', '.join(PRICES)}"
            )
        self.model = model
        self.max_cost = max_cost
        self.max_llm_calls = max_llm_calls
        self.total = Spend()
        self._ledger: Path | None = None
        self._largest_call_usd = 0.0

    def open_ledger(self, workspace: str | None) -> None:
        """Count what earlier sessions of this run spent, once, and record every call from now.
        Budgets of one run in this process (an agent per target, with --gpus) share one total,
        so the caps hold for the run, not for each agent."""
        if workspace is None or self._ledger is not None:
            return
        self._ledger = Path(workspace) / LEDGER_FILE
        key = str(self._ledger.resolve())
        if key in _RUN_TOTALS:
            self.total = _RUN_TOTALS[key]
            return
        _RUN_TOTALS[key] = self.total
        try:
            earlier = Spend.from_dict(json.loads(self._ledger.read_text()))
        except (OSError, ValueError, AttributeError):
            return  # no earlier session (or an unreadable ledger: start counting afresh)
        self.total.add(earlier)
        if earlier.calls:
            self._largest_call_usd = max(self._largest_call_usd, earlier.cost_usd / earlier.calls)

    def record(self, call: Spend) -> None:
        """Count one request's spend into the run's total, and save the total at once."""
        self.total.add(call)
        self._save_ledger()
        self._largest_call_usd = max(self._largest_call_usd, call.cost_usd)

    def _save_ledger(self) -> None:
        if self._ledger is None:
            return
        try:
            self._ledger.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self._ledger, json.dumps(self.total.to_dict(), indent=1) + "\n")
        except OSError:
            pass  # the caps still hold for this session; only a resume would forget the spend

    def stop_reason(self, prompt_chars: int = 0) -> str:
        """Why the next request must not be made (a cap would be crossed), or ''."""
        spent = f"{self.total.describe()}"
        if self.max_llm_calls is not None and self.total.calls >= self.max_llm_calls:
            return f"--max-llm-calls {self.max_llm_calls} reached ({spent})"
        if self.max_cost is not None:
            projected = self._largest_call_usd or self._estimate_first_call(prompt_chars)
            if self.total.cost_usd + projected > self.max_cost:
                return (
                    f"--max-cost ${self.max_cost:.2f} reached: ${self.total.cost_usd:.4f} spent "
                    f"and the next call may cost ~${projected:.4f} ({spent})"
                )
        return ""

    def _estimate_first_call(self, prompt_chars: int) -> float:
        """Before any request has been priced: the prompt written to the cache, ~4k tokens out."""
        price = price_for(self.model)
        if price is None:
            return 0.0
        return (prompt_chars / 3.5 * price.cache_write_5m + 4_000 * price.output) / 1e6
