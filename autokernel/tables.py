"""Tables that fit the terminal: the one place every printed table is laid out.

A table is given as `Column`s and rows of cells, and `fit_table` lays it out for a width (the
console's: rich reads COLUMNS, or the real terminal's width):

- a column whose every cell is empty ("", "–", "-") is dropped;
- figures and names (a column with `wrap=False`) are never split or cut: their column is as
  wide as their widest cell;
- free text (`wrap=True`) wraps at spaces, never narrower than its longest word, and so does
  its header;
- a header is never cut either: when the full headers do not fit, every column with a `short`
  header takes it, and the legend under the table says what each abbreviation means;
- when that does not fit, the columns marked `drop` (1 first, then 2, ...) are left out, and a
  line under the table names them;
- when even that does not fit, each row is printed as a block of `header: value` lines.

The abbreviations are shared (`ABBREVIATIONS`), so a figure is abbreviated the same way in every
table that shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

EMPTY_CELLS = frozenset({"", "–", "-"})
GAP = 2  # cells between two columns (a space of padding on each side of the separator)
NARROWEST_TEXT = 8  # a free-text column gets at least this many cells, to wrap readably

# The short headers every table uses for the same figure, with what they mean.
ABBREVIATIONS: dict[str, str] = {
    "×eager": "speedup over eager PyTorch",
    "×compile": "speedup over torch.compile",
    "×base": "the best kernel against the target's baseline, in the keep rule's figure",
    "×best": "the keep rule's paired speedup over the best kernel, with its 95% interval",
    "exp": "experiments",
    "%peak": "percent of the GPU's peak (datasheet)",
    "calls/fwd": "kernel calls per forward",
    "ms/fwd": "milliseconds per forward",
}


@dataclass(frozen=True)
class Column:
    """One column: its header, an optional abbreviation for narrow terminals (`short`, whose
    meaning `legend` gives, else `ABBREVIATIONS`'), how it is justified and whether its cells
    are free text that may wrap."""

    header: str
    short: str | None = None
    legend: str = ""
    justify: str = "left"
    wrap: bool = False
    keep_empty: bool = False
    drop: int = 0  # left out on a narrow terminal, lowest first (0: never)

    def meaning(self) -> str:
        return self.legend or ABBREVIATIONS.get(self.short or "", self.header)


Cell = Any  # str or rich Text


def _plain(cell: Cell) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def _width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def _longest_word(text: str) -> int:
    return max((_width(word) for word in text.split()), default=0)


def is_empty(cell: Cell) -> bool:
    return _plain(cell).strip() in EMPTY_CELLS


@dataclass(frozen=True)
class Layout:
    """How a table was laid out: the columns kept, whether their short headers were used, and
    each column's width (None: stacked, one block per row)."""

    columns: list[Column]
    short: bool
    widths: list[int] | None
    dropped: tuple[Column, ...] = ()

    def header(self, column: Column) -> str:
        return (column.short or column.header) if self.short else column.header


def layout(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> Layout:
    """The columns to keep, which headers and which widths make the table fit `width`."""
    shown = [c for i, c in enumerate(columns)
             if c.keep_empty or not rows or any(not is_empty(row[i]) for row in rows)]
    attempts: list[tuple[bool, tuple[Column, ...]]] = [(False, ())]
    if any(c.short for c in shown):
        attempts.append((True, ()))
    for level in sorted({c.drop for c in shown if c.drop}):
        attempts.append((True, tuple(c for c in shown if 0 < c.drop <= level)))
    for short, dropped in attempts:
        chosen = [c for c in shown if c not in dropped]
        widths = _widths(chosen, [list(columns).index(c) for c in chosen], rows, short, width)
        if widths is not None:
            return Layout(chosen, short, widths, dropped)
    return Layout(shown, attempts[-1][0] or len(attempts) > 1, None)


def _widths(chosen: list[Column], index: list[int], rows: Sequence[Sequence[Cell]], short: bool,
            width: int) -> list[int] | None:
    """Each column's width at `width`, or None when the columns cannot fit."""
    heading = Layout(chosen, short, None)
    minimum, natural = [], []
    for column, i in zip(chosen, index):
        cells = [_plain(row[i]) for row in rows]
        header = _width(heading.header(column))
        widest = max([_width(cell) for cell in cells] + [header])
        if column.wrap:  # its header may wrap at spaces too, never inside a word
            longest = max([_longest_word(cell) for cell in cells]
                          + [_longest_word(heading.header(column))])
            minimum.append(min(widest, max(longest, NARROWEST_TEXT)))
        else:
            minimum.append(widest)
        natural.append(widest)
    spare = width - sum(minimum) - GAP * (len(chosen) - 1)
    if spare < 0:
        return None
    widths = list(minimum)
    for j, column in enumerate(chosen):  # the spare width goes to the text, left first
        if column.wrap and spare > 0:
            extra = min(spare, natural[j] - widths[j])
            widths[j] += extra
            spare -= extra
    return widths


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, *,
              title: str | None = None, row_styles: Sequence[str | None] | None = None,
              notes: Sequence[str] = ()) -> RenderableType:
    """The table laid out for `width` (see the module's docstring), with the legend of its
    abbreviations and any `notes` under it."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    plan = layout(columns, rows, width)
    index = [list(columns).index(c) for c in plan.columns]
    parts: list[Any] = []
    if plan.widths is None:
        parts += _stacked(plan, index, rows, title)
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                      collapse_padding=True, title=title, title_justify="left",
                      title_style="bold")
        for column, cells_width in zip(plan.columns, plan.widths):
            table.add_column(plan.header(column), justify=column.justify,  # type: ignore[arg-type]
                             width=cells_width, no_wrap=not column.wrap,
                             overflow="fold")  # never reached: each width holds its cells
        for n, row in enumerate(rows):
            style = row_styles[n] if row_styles else None
            table.add_row(*(row[i] for i in index), style=style)
        parts.append(table)
    legend = legend_line(plan)
    if plan.dropped:
        left_out = ", ".join(c.header for c in plan.dropped)
        legend = "; ".join(part for part in (legend, f"left out at this width: {left_out}")
                           if part)
    for line in ([legend] if legend else []) + list(notes):
        parts.append(Text(line, style="dim"))
    return Group(*parts)


def legend_line(plan: Layout) -> str:
    """'×eager: speedup over eager PyTorch; exp: experiments': what the abbreviated headers of
    this layout mean ("" when none is abbreviated)."""
    if not plan.short:
        return ""
    meanings = [f"{c.short}: {c.meaning()}" for c in plan.columns
                if c.short and c.short != c.meaning()]
    return "; ".join(meanings)


def _stacked(plan: Layout, index: list[int], rows: Sequence[Sequence[Cell]],
             title: str | None) -> list[Text]:
    """Too narrow for columns: each row as its first cell, then `header: value` lines."""
    from rich.text import Text

    lines: list[Text] = [Text(title, style="bold")] if title else []
    for row in rows:
        cells = [row[i] for i in index]
        lines.append(Text(_plain(cells[0]), style="bold"))
        for column, cell in zip(plan.columns[1:], cells[1:]):
            if not is_empty(cell):
                lines.append(Text.assemble(f"  {plan.header(column)}: ", cell
                                           if isinstance(cell, Text) else Text(str(cell))))
    return lines


def render_text(renderable: RenderableType, width: int) -> str:
    """What `renderable` prints at `width` columns, as plain text (for tests and logs)."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None, record=False,
                      force_terminal=False, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]
