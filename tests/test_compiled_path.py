"""verify's compiled-path rule (issue 14), with made-up timings: patched torch.compile is never
left slower than torch.compile without kernels being taken out of the graph, and said so."""

from __future__ import annotations

from autokernel.integrate.compiled_path import (
    SLOWER_ALONE, STILL_LOSING, compiled_path_lines, next_left_out, settle,
)

ALONE = {"01_rmsnorm": 1.4, "02_softmax": 0.9, "03_gelu": None}


def test_a_win_or_a_tie_leaves_everything_in_the_graph() -> None:
    assert next_left_out(1.0, list(ALONE), [], ALONE) is None
    assert next_left_out(None, list(ALONE), [], ALONE) is None


def test_a_loss_takes_out_the_kernels_slower_alone_first_then_all() -> None:
    tags = list(ALONE)
    assert next_left_out(0.9, tags, [], ALONE) == (["02_softmax", "03_gelu"], SLOWER_ALONE)
    assert next_left_out(0.95, tags, ["02_softmax", "03_gelu"], ALONE) == (
        ["01_rmsnorm"], STILL_LOSING)
    assert next_left_out(0.95, tags, tags, ALONE) is None  # nothing left to take out


def test_settle_retimes_until_the_rule_is_met_and_records_each_step() -> None:
    ratios = iter([0.97, 1.0])
    asked: list[list[str]] = []

    def retime(left_out: list[str]) -> float:
        asked.append(left_out)
        return next(ratios)

    record = settle(0.86, list(ALONE), {"04_matmul": "opaque to torch.compile (custom_op: x)"},
                    ALONE, True, retime)
    assert asked == [["02_softmax", "03_gelu"], ["02_softmax", "03_gelu", "01_rmsnorm"]]
    assert record["ratio"] == 1.0 and record["first_ratio"] == 0.86
    assert record["left_out"] == {"02_softmax": SLOWER_ALONE, "03_gelu": SLOWER_ALONE,
                                  "01_rmsnorm": STILL_LOSING}
    text = "\n".join(compiled_path_lines(record))
    assert "04_matmul left to Inductor: opaque to torch.compile (custom_op: x)" in text
    assert "left out 02_softmax, 03_gelu (slower than torch.compile alone" in text
    assert "0.970× vs torch.compile" in text and "met at 1.000×" in text


def test_on_the_cpu_the_rule_is_recorded_but_not_applied() -> None:
    def retime(left_out: list[str]) -> float:
        raise AssertionError("no timing on the CPU")

    record = settle(0.5, list(ALONE), {}, ALONE, False, retime)
    assert record["applied"] is False and record["attempts"] == []
    assert "not applied on the CPU" in "\n".join(compiled_path_lines(record))
