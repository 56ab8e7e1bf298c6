"""What a `--agent claude` night can cost with the default caps, from the code's own caps and
list prices (the README's "What a Claude night costs" quotes this script's output).

    python -m autokernel.benchmarks claude-night-cost [--experiments 100]

With no --max-cost and no --max-llm-calls, what bounds an experiment is the agent's own limits:
one planning request of at most `planner_max_tokens` output tokens, then a conversation of at
most `max_turns` requests of at most `max_tokens` output tokens each (ClaudeAgent's defaults),
priced at the default model's list price (agents/claude_spend.PRICES). Prompt tokens are not
bounded the same way (they grow with the conversation); most are cache reads, priced apart.
"""

from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class NightCost:
    model: str
    requests: int  # per experiment, at most: the plan and the conversation's turns
    output_tokens: int  # per experiment, at most
    output_usd: float  # per experiment, at most
    input_per_mtok: float
    cache_read_per_mtok: float
    output_per_mtok: float


def night_cost() -> NightCost:
    from autokernel.agents.claude import DEFAULT_MODEL, ClaudeAgent
    from autokernel.agents.claude_spend import price_for

    defaults = {name: p.default for name, p in
                inspect.signature(ClaudeAgent.__init__).parameters.items()}
    price = price_for(DEFAULT_MODEL)
    assert price is not None, f"no list price for the default model {DEFAULT_MODEL}"
    turns, per_reply = int(defaults["max_turns"]), int(defaults["max_tokens"])
    plan = int(defaults["planner_max_tokens"]) if defaults["planner"] else 0
    output = turns * per_reply + plan
    return NightCost(DEFAULT_MODEL, turns + (1 if plan else 0), output,
                     output * price.output / 1e6, price.input, price.cache_read, price.output)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=100)
    args = parser.parse_args(argv)
    cost = night_cost()
    print(f"default model {cost.model}: ${cost.input_per_mtok:g}/M input, "
          f"${cost.cache_read_per_mtok:g}/M cache reads, ${cost.output_per_mtok:g}/M output")
    print(f"per experiment at most {cost.requests} requests and {cost.output_tokens:,} output "
          f"tokens: ${cost.output_usd:.2f} of output")
    print(f"{args.experiments} experiments: at most ${cost.output_usd * args.experiments:,.0f} "
          "of output, plus their prompts")


if __name__ == "__main__":
    main()
