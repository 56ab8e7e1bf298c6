"""How figures and failures are written for people: durations, counts and one-line error
summaries."""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    """A duration in the largest unit it reaches: '2.0 h', '3.5 min', '12 s'."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def format_speedup(ratio: float | None) -> str:
    """A speedup as people read it: '1.18×', and '0.00081×' (not '0.00×') on the interpreter;
    '–' when it was not measured."""
    if ratio is None:
        return "–"
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def format_ratio(value: float | None) -> str:
    """A ratio judged against a threshold near 1 (the keep rule's 1.010×, an end-to-end
    speedup), to three decimals: '1.134×', and '0.0082×' far below 1; '–' when not measured."""
    if value is None:
        return "–"
    return f"{value:.3f}×" if value >= 0.1 else f"{value:.2g}×"


def format_latency(us: float | None) -> str:
    """A latency given in µs: '41.2 µs', and '76.81 ms' from a millisecond on; '–' when it was
    not measured."""
    if us is None:
        return "–"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def count_of(number: int, noun: str) -> str:
    """'1 experiment', '3 experiments': a count with its noun in the right number."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def scope_name(path: str) -> str:
    """A module path as people read it: the empty path (the model's top-level module, where
    calls anywhere in its forward are intercepted) is 'the whole model'."""
    return path or "the whole model"


# Characters that start Markdown syntax inside a line: escaped by markdown_cell.
MARKDOWN_SPECIAL = "\\`*[]|<>"


def markdown_cell(text: str) -> str:
    """`text` as Markdown shows it literally, in a table cell or a line: `<model>` is not taken
    for an HTML tag, `|` does not end the cell, `*` and `_` start no emphasis. An underscore
    inside a word (01_rmsnorm) never starts emphasis, so it is left as it is."""
    flat = " ".join(str(text).split())
    escaped = []
    for i, char in enumerate(flat):
        inside_word = (char == "_" and 0 < i < len(flat) - 1 and flat[i - 1].isalnum()
                       and flat[i + 1].isalnum())
        if char in MARKDOWN_SPECIAL or (char == "_" and not inside_word):
            escaped.append("\\" + char)
        else:
            escaped.append(char)
    return "".join(escaped)


def error_summary(exc: BaseException, limit: int | None = None) -> str:
    """'TypeName: first line of the message', the line cut to `limit` characters; just
    'TypeName' for an exception without a message."""
    first = (str(exc).strip().splitlines() or [""])[0]
    if limit is not None:
        first = first[:limit]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def bounded_text(text: str, limit: int, head: int = 1500) -> str:
    """`text` if it fits in `limit` characters, else its first `head` and its last characters
    around a note of what was cut (a traceback's end says most, its start says where)."""
    if len(text) <= limit:
        return text
    head = min(head, limit // 2)
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"
