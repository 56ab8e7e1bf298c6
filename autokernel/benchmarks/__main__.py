"""`python -m autokernel.benchmarks NAME [ARGS...]`, `--list`: run one benchmark of the suite.

ARGS go to the benchmark as they are (`python -m autokernel.benchmarks NAME -h` shows its own
options). Before it runs, the GPU, versions and commit are printed on stderr, and written to
`$OUT/<NAME>-env.json` when $OUT (the device runner's output folder) is set.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from autokernel.benchmarks.record import REPO, environment, write_environment
from autokernel.benchmarks.registry import BENCHMARKS, SHELL_DIR, find


def list_benchmarks() -> str:
    width = max(len(b.name) for b in BENCHMARKS)
    lines = []
    for bench in BENCHMARKS:
        where = "GPU" if bench.gpu else "any machine"
        records = ", ".join(bench.records) or "no record yet"
        lines.append(f"{bench.name:<{width}}  {bench.summary} [{where}; records: {records}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\n" + list_benchmarks())
        return 0 if args else 2
    if args[0] == "--list":
        print(list_benchmarks())
        return 0
    bench = find(args[0])
    if bench is None:
        print(f"error: no benchmark {args[0]!r}; `python -m autokernel.benchmarks --list` says "
              "which there are", file=sys.stderr)
        return 2
    rest = args[1:]
    if rest[:1] not in (["-h"], ["--help"]):
        record = environment(bench.name, rest)
        print(json.dumps(record), file=sys.stderr)
        if os.environ.get("OUT"):
            write_environment(record, Path(os.environ["OUT"]))
    if bench.script:
        return subprocess.run(["bash", str(SHELL_DIR / bench.script), *rest], cwd=REPO).returncode
    module = importlib.import_module(f"autokernel.benchmarks.{bench.module}")
    sys.argv[0] = bench.command()  # argparse's usage line names the benchmark
    status = module.main(rest)
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
