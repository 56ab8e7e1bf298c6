"""Broken drafts of tests/fixtures/anthropic/reduce_rows.py, each with its fix (test_claude_repair).

Every draft passes the static check (the anti-cheat scan included), so only compile_kernel or
test_kernel can find its error: `tool` is the check that reports it. `old` is the broken text in
the draft (unique) and `new` its fix, applied with edit_kernel; the fixed draft is INTENDED.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASE = (Path(__file__).parent / "fixtures" / "anthropic" / "reduce_rows.py").read_text()
# The experiment's intended change (x is read once: stream it past L2); every draft is this plus
# one error, so a repaired draft is a real change of the best and not the best again.
INTENDED = BASE.replace(
    "mask=mask, other=0.0).to(tl.float32)",
    'mask=mask, other=0.0,\n                      eviction_policy="evict_first").to(tl.float32)')


@dataclass(frozen=True)
class BrokenDraft:
    name: str
    tool: str  # compile_kernel or test_kernel: the check that reports the error
    good: str  # text of the base kernel the draft breaks
    old: str  # what the draft has instead
    what: str

    @property
    def source(self) -> str:
        assert INTENDED.count(self.good) == 1, self.name
        return INTENDED.replace(self.good, self.old)

    @property
    def new(self) -> str:
        return self.good


CORPUS = (
    BrokenDraft(
        "type_error", "compile_kernel",
        "base = x_ptr + rows.to(tl.int64)[:, None] * stride_row",
        "base = x_ptr + rows.to(tl.float32)[:, None] * stride_row",
        "pointer plus a float offset: a Triton type error"),
    BrokenDraft(
        "undefined_in_jit", "compile_kernel",
        "tl.sum(acc, axis=1)",
        "tl.reduce_sum(acc, axis=1)",
        "a Triton function that does not exist (tl.reduce_sum), called inside @triton.jit"),
    BrokenDraft(
        "arange_not_power_of_2", "compile_kernel",
        'BLOCK_N = 64\nNUM_WARPS = 4\n'
        'TUNABLE_SPACE = {"BLOCK_M": [1, 2, 4, 8], "BLOCK_N": [32, 64, 128],',
        'BLOCK_N = 96\nNUM_WARPS = 4\n'
        'TUNABLE_SPACE = {"BLOCK_M": [1, 2, 4, 8], "BLOCK_N": [48, 96, 192],',
        "tl.arange over 96 columns: not a power of two"),
    BrokenDraft(
        "shape_mismatch", "compile_kernel",
        "tl.sum(acc, axis=1)",
        "tl.sum(acc, axis=0)",
        "a per-column sum stored into per-row slots: [BLOCK_N] against [BLOCK_M]"),
    BrokenDraft(
        "missing_mask", "test_kernel",
        "        mask = row_ok[:, None] & (cols < n_cols)[None, :]\n",
        "        mask = row_ok[:, None]\n",
        "the column mask dropped: a row's tail reads the next row"),
    BrokenDraft(
        "wrong_accumulation", "test_kernel",
        "        acc += tl.load(",
        "        acc = tl.load(",
        "each chunk overwrites the accumulator instead of adding to it"),
)
