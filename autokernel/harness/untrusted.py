"""Text and figures that came from a candidate process, made safe to keep, print and believe.

Nothing a candidate process sends decides a verdict by itself; what the judge keeps of it (an
exception message, a sandbox layer's description, a launch digest) passes through here first:

- `candidate_text`: control characters dropped (ANSI escape sequences, carriage returns, bidi
  overrides: a terminal must show what the JSON holds), rich markup escaped (`[green]PASS[/]`
  prints as written, never as a green PASS), and the length capped (no exfiltration channel of
  any size through the report).
- `candidate_number`, `candidate_numbers`: finite floats in a range, else the message is bad.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rich.markup import escape

# C0 controls but tab and newline, DEL, C1 controls, and the bidi embedding/override/isolate
# characters that reorder what a terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
REASON_CHARS = 1500
DETAIL_CHARS = 8000
NOTE_CHARS = 300


class UntrustedValueError(ValueError):
    """A figure from the candidate process that cannot be what the protocol says it is."""


def candidate_text(value: Any, limit: int = REASON_CHARS) -> str:
    """`value` as text safe to print: no escape sequences or control characters, rich markup
    escaped, at most `limit` characters (a cut is marked)."""
    text = _UNPRINTABLE.sub("", _ANSI.sub("", str(value)))
    if len(text) > limit:
        text = text[: max(0, limit - 12)] + " [... cut]"
    return escape(text)


def candidate_number(value: Any, what: str, low: float = 0.0,
                     high: float = float("inf")) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise UntrustedValueError(f"{what} is not a number in [{low}, {high}]: {str(value)[:40]}")
    return float(value)


def candidate_numbers(value: Any, what: str, count: int | None = None,
                      high: float = float("inf")) -> list[float]:
    if not isinstance(value, list) or (count is not None and len(value) != count):
        raise UntrustedValueError(f"{what} is not a list of {count if count else 'some'} numbers")
    return [candidate_number(v, what, high=high) for v in value]
