"""Issue 29: every table fits 80 and 100 columns (autokernel/tables.py): no line wider than the
terminal, no number or name split or cut, no header cut, empty columns dropped, abbreviations
explained under the table. Fast: no model runs, the tables are fed recorded results."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from bench_results import passing_result
from rich.console import Console
from test_verify_result import _result

from autokernel.profiling.plan import Plan
from autokernel.tables import Column, fit_table, layout, render_text

REPO = Path(__file__).resolve().parents[1]
WIDTHS = (80, 100)


def printed(width: int, draw) -> str:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=width, color_system=None)
    draw(console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def assert_fits(text: str, width: int, cells: list[str]) -> None:
    """Every line within `width`, nothing cut short, and each cell whole on one line."""
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, text
    assert "…" not in text, text
    for cell in cells:
        assert any(cell in line for line in lines), (cell, text)


def test_fit_table_drops_empty_columns_and_abbreviates_with_a_legend() -> None:
    columns = [Column("target"), Column("speedup over eager PyTorch", "×eager", justify="right"),
               Column("nothing measured"), Column("why it stopped", wrap=True)]
    rows = [["01_linear_cross_entropy", "1.234×", "–", "plateau: 5 experiments in a row"],
            ["02_rmsnorm", "12.34×", "", "time: its share of the run's time is spent"]]
    wide = layout(columns, rows, 200)
    assert not wide.short and [c.header for c in wide.columns] == \
        ["target", "speedup over eager PyTorch", "why it stopped"]
    for width in (46, 56):  # too narrow for the full headers
        text = render_text(fit_table(columns, rows, width), width)
        assert_fits(text, width, ["01_linear_cross_entropy", "02_rmsnorm", "1.234×", "12.34×",
                                  "×eager", "stopped"])  # a free-text header wraps at spaces
        assert "nothing measured" not in text and "×eager: speedup over eager PyTorch" in text
    narrow = render_text(fit_table(columns, rows, 24), 24)  # a row per block, still whole
    assert "01_linear_cross_entropy" in narrow and "  ×eager: 1.234×" in narrow


@pytest.mark.parametrize("width", WIDTHS)
def test_profile_fits(width: int) -> None:
    from autokernel.cli.profile import print_plan
    from autokernel.profiling.ranking import plan_rows

    plan = Plan.load(REPO / "docs" / "profiles" / "llama_7b_layers.json")
    text = printed(width, lambda console: print_plan(plan, None, console))
    rows = plan_rows(plan)
    assert_fits(text, width, [row[1] for row in rows] + [row[2] for row in rows]
                + [row[9] for row in rows])  # kernel type, share, 2× e2e
    assert "2x" not in text.replace("2×", "")


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_fits(width: int) -> None:
    from autokernel.cli.bench import print_summary
    from autokernel.harness.result import ShapeTiming

    result = passing_result(
        1234.5678, iqr_us=12.3, shape=[4096, 50257], dtype="fp16", eager_us=2345.6,
        compile_us=1999.9, speedup_vs_eager=1.9, speedup_vs_compile=1.62,
        pct_peak_datasheet=71.2, pct_peak_measured=80.4, launch_us=4.1, eager_launch_us=9.2,
        vs_incumbent=1.034, vs_incumbent_lo=1.012, vs_incumbent_hi=1.055, throughput=2870.0,
        throughput_unit="GB/s", kernel_type="cross_entropy", backend="triton",
        gpu="NVIDIA H200", timing_meaningful=True, stages={"smoke": "pass", "timing": "pass"})
    result.timings.append(ShapeTiming(shape=[1024, 50257], dtype="fp16", latency_us=321.0,
                                      iqr_us=2.0, eager_us=600.0, speedup_vs_eager=1.87))
    text = printed(width, lambda console: print_summary(result, Path("kernel.py"), console))
    assert_fits(text, width, ["4096x50257", "1,234.57 ±12.30", "2,345.60", "1.90×", "1.62×",
                              "1.034× (1.012–1.055)", "1024x50257", "1.87×"])
    assert "eager/compile" not in text  # one figure a column


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_fits_and_shows_names_whole(width: int, tmp_path: Path) -> None:
    from autokernel.integrate.verify_result import print_result

    def timed(median_us: float) -> dict[str, float]:
        return {"median_us": median_us, "iqr_us": 1.5}

    contestants = {"eager": timed(1234.5), "patched": timed(1000.25), "compile": timed(1100.0),
                   "patched_compile": timed(1099.0)}
    result = _result(tmp_path, timing={"meaningful": True, "errors": {},
                                       "device": {"rounds": 200, "contestants": contestants},
                                       "wall": {"rounds": 200, "contestants": contestants}},
                     speedup={"device": {"vs_eager": 1.234, "vs_compile": 1.1, "noise": 0.01}})
    result["kernels"][0]["tag"] = "03_linear_cross_entropy"
    text = printed(width, lambda console: print_result(result, console))
    assert_fits(text, width, ["03_linear_cross_entropy", "02_softmax", "1.23× eager", "25.0%",
                              "1.23 ms", "1.00 ms", "1.234× vs eager"])
    assert "(200 rounds)" in " ".join(text.split())


def test_profile_honours_columns_when_piped() -> None:
    """Piped, the table was 149 wide whatever COLUMNS said; it now takes COLUMNS."""
    import os
    import subprocess
    import sys

    problem = REPO / "tests" / "fixtures" / "kernelbench_tiny" / "softmax_rows.py"
    done = subprocess.run([sys.executable, "-m", "autokernel", "profile", str(problem),
                           "--device", "cpu", "--iters", "1", "--warmup", "0"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert_fits(done.stdout, 80, ["softmax", "100.0%"])


def test_markdown_cells_show_their_text_literally() -> None:
    from autokernel.text import markdown_cell

    assert markdown_cell("calls in <model> | a*b") == "calls in \\<model\\> \\| a\\*b"
    assert markdown_cell("01_rmsnorm __init__") == "01_rmsnorm \\_\\_init\\_\\_"
    assert markdown_cell("two\nlines") == "two lines"
