"""The adversarial table for docs/benchmarks: every case of `tests/test_harness.py`'s CPU_CASES
with the verdict it must get, and what a pytest run (its junit XML) found.

    python -m pytest tests/test_harness.py -k adversarial_and_honest --junitxml=run.xml
    python -m autokernel.benchmarks adversarial-table run.xml > table.md

The verdicts in the table are the test's expectations for a device (the test module computes them
for the device it sees; `--device cuda` renders the GPU's on a CPU machine, for an XML made on a
GPU). A row the run failed shows the failure's first line.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from autokernel.benchmarks.record import REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit_xml", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="whose expectations to render (default: this machine's)")
    args = parser.parse_args(argv)
    import torch

    available = torch.cuda.is_available
    if args.device is not None:
        # The expectations are data computed at import from the device the tests see: render
        # the asked device's (only the module's import runs under this; nothing is launched).
        torch.cuda.is_available = lambda: args.device == "cuda"
    if args.device != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO / "tests"))
    try:
        import test_harness
    finally:
        torch.cuda.is_available = available
    cases = test_harness.CPU_CASES
    outcomes: dict[str, str] = {}
    for testcase in ET.parse(args.junit_xml).iter("testcase"):
        name = testcase.get("name", "")
        if not name.startswith("test_adversarial_and_honest_kernels["):
            continue
        failure = testcase.find("failure")
        outcomes[name.split("[", 1)[1].rstrip("]")] = (
            "as expected" if failure is None and testcase.find("skipped") is None
            else "skipped" if failure is None
            else "**not as expected**: " + (failure.get("message") or "").splitlines()[0][:160])
    print("| kernel file | static scan | expected verdict (status, rule, stage) | reason contains "
          "| this run |")
    print("|---|---|---|---|---|")
    held = 0
    for name, static, status, rule, stage, text in cases:
        case_id = f"{name.removesuffix('.py')}{'' if static else '-dynamic'}"
        outcome = outcomes.get(case_id, "not run")
        held += outcome == "as expected"
        print(f"| `{name}` | {'on' if static else 'off'} | {status.value}, {rule or '–'}, "
              f"{stage or '–'} | {text.replace('|', '/') or '–'} | {outcome} |")
    print(f"\n{held} of {len(cases)} cases as expected.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
