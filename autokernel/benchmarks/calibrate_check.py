"""On a GPU machine: does `autokernel doctor` recognise the card and measure sensible ceilings?

    python -m autokernel.benchmarks calibrate-check           # re-measures (~10 s on an H100)
    python -m autokernel.benchmarks calibrate-check --cached   # accept cached ceilings

Runs `autokernel doctor --json --calibrate` in a subprocess, then checks that the GPU matched a
datasheet entry (not an estimate), that the entry's compute capability is the card's, and that the
measured copy bandwidth and bf16 GEMM rate are plausible fractions of the datasheet (copy 70-100%,
GEMM 55-100%: an H100 SXM measured 3.0 TB/s and 798 TFLOP/s, an H200 4.23 TB/s and 796-799
with the rested-rounds method, 676-797 with the single median it replaced).
Prints one line per finding; exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

COPY_FRACTION = (0.70, 1.00)
GEMM_FRACTION = (0.55, 1.00)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cached", action="store_true", help="do not force a re-measurement")
    args = parser.parse_args(argv)

    command = [sys.executable, "-m", "autokernel", "doctor", "--json"]
    command.append("--no-calibrate" if args.cached else "--calibrate")
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        print(f"FAIL doctor printed no JSON (exit {done.returncode}):\n{done.stdout}{done.stderr}")
        return 1

    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        print(("ok   " if ok else "FAIL ") + message)
        if not ok:
            problems.append(message)

    check(report["ok"], f"doctor's essential checks (exit {done.returncode})")
    for item in report["checks"]:
        print(f"     {item['name']}: {item['status']}: {item['detail']}")
    gpu, sheet, ceilings = report["gpu"], report["datasheet"], report["ceilings"]
    check(gpu is not None, "a GPU is visible")
    if gpu is None:
        return 1
    check(sheet is not None and not sheet["estimated"],
          f"{gpu['name']!r} matched a datasheet entry"
          + (f" ({sheet['key']})" if sheet else ""))
    if sheet and sheet["compute_capability"]:
        check(sheet["compute_capability"] == gpu["compute_capability"],
              f"compute capability {gpu['compute_capability']} agrees with the entry")
    check(ceilings is not None, "measured ceilings are available")
    if sheet and ceilings:
        copy = ceilings["gbps"] / sheet["gbps"]
        gemm = ceilings["bf16_tflops"] / sheet["bf16_tflops"]
        check(COPY_FRACTION[0] <= copy <= COPY_FRACTION[1],
              f"copy {ceilings['gbps']:.0f} GB/s = {copy:.0%} of {sheet['gbps']:g} GB/s")
        check(GEMM_FRACTION[0] <= gemm <= GEMM_FRACTION[1],
              f"bf16 GEMM {ceilings['bf16_tflops']:.0f} TFLOP/s = {gemm:.0%} of "
              f"{sheet['bf16_tflops']:g} TFLOP/s")
        print(f"     measured {ceilings['measured_at']} by: {ceilings['method']}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
