"""Record a verified GPU run as the README's measured result.

    autokernel run examples/models/mistral_decoder.py --hours 8 --out runs/mistral
    autokernel verify runs/mistral
    COMMIT=$(git rev-parse --short HEAD) python -m autokernel.benchmarks record-result \\
        runs/mistral mistral-h200-$(git rev-parse --short HEAD) --readme README.md

writes docs/benchmarks/NAME/ (the run's report.md, progress.png, results.tsv, verify.json and a
README.md with the GPU, driver, versions, commit and command) and replaces the README's section
between its `gpu-result` markers with the run's table, end-to-end figures and plot. Without
--readme the section is printed instead. Every figure comes from the run's own files
(autokernel/integrate/result_record.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autokernel.benchmarks.record import REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished run, verified")
    parser.add_argument("name", help="the record's directory under docs/benchmarks/")
    parser.add_argument("--readme", type=Path, default=None,
                        help="replace this README's gpu-result section (else print it)")
    parser.add_argument("--benchmarks", type=Path, default=REPO / "docs" / "benchmarks")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="accept a CPU run (a rehearsal: its timings mean nothing)")
    parser.add_argument("--commit", default=None,
                        help="the commit the run was made at (default: this checkout's), for a "
                             "run recorded on another machine than the GPU's")
    parser.add_argument("--driver", default=None,
                        help="the GPU's driver version (default: this machine's nvidia-smi)")
    args = parser.parse_args(argv)

    from autokernel.integrate.result_record import record_result, replace_section
    from autokernel.versions import source_commit

    try:
        record, section = record_result(args.run_dir, args.benchmarks, args.name,
                                        args.commit or source_commit(REPO),
                                        driver=args.driver, allow_cpu=args.allow_cpu)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {record}", file=sys.stderr)
    if args.readme is None:
        print(section)
        return 0
    text = args.readme.read_text(encoding="utf-8")
    args.readme.write_text(replace_section(text, section), encoding="utf-8")
    print(f"updated the measured-result section of {args.readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
