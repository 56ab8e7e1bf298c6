"""The benchmark suite's registry against the tree (static: no benchmark runs; < 1 s).

Every registered benchmark has its module (with `main(argv)`) or its shell script, every record
it claims exists under docs/benchmarks, docs/benchmarks/README.md names every benchmark, and
scripts/ holds the GPU acceptance entry point only.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from autokernel.benchmarks.registry import BENCHMARKS, SHELL_DIR, find

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "autokernel" / "benchmarks"
RECORDS = ROOT / "docs" / "benchmarks"


def _main_takes_argv(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return [a.arg for a in node.args.args] == ["argv"]
    return False


def test_every_benchmark_has_its_code() -> None:
    assert len({b.name for b in BENCHMARKS}) == len(BENCHMARKS)
    for bench in BENCHMARKS:
        assert bool(bench.module) != bool(bench.script), bench.name
        if bench.module:
            assert _main_takes_argv(SUITE / f"{bench.module}.py"), bench.name
        else:
            assert (SHELL_DIR / bench.script).is_file(), bench.name


def test_every_claimed_record_exists_and_the_readme_names_every_benchmark() -> None:
    for bench in BENCHMARKS:
        for pattern in bench.records:
            assert list(RECORDS.glob(pattern.rstrip("/"))), (bench.name, pattern)
    readme = (RECORDS / "README.md").read_text(encoding="utf-8")
    recorded = [b.name for b in BENCHMARKS if b.records]
    assert all(f"`{name}" in readme for name in recorded), recorded


def test_scripts_holds_the_acceptance_entry_point_only() -> None:
    assert sorted(p.name for p in (ROOT / "scripts").iterdir()) == ["gpu_acceptance.sh"]
    acceptance = (ROOT / "scripts" / "gpu_acceptance.sh").read_text(encoding="utf-8")
    for name in ("harness-table", "profiles"):
        assert f"-m autokernel.benchmarks {name}" in acceptance and find(name) is not None


def test_the_suite_lists_its_benchmarks_and_refuses_an_unknown_one() -> None:
    listed = subprocess.run([sys.executable, "-m", "autokernel.benchmarks", "--list"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        b.name for b in BENCHMARKS]
    unknown = subprocess.run([sys.executable, "-m", "autokernel.benchmarks", "no-such"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert unknown.returncode == 2 and "--list" in unknown.stderr


def test_matmul_roles_reads_tunables_as_the_starter_spells_them() -> None:
    from autokernel.benchmarks.matmul_roles import parse_tunables

    assert parse_tunables("") == {}
    assert parse_tunables("VARIANT=persistent_tma, WARP_SPECIALIZE=true,BLOCK_M=64") == {
        "VARIANT": "persistent_tma", "WARP_SPECIALIZE": True, "BLOCK_M": 64}
    assert parse_tunables("WARP_SPECIALIZE=False,SPLIT_K=-1") == {"WARP_SPECIALIZE": False,
                                                                  "SPLIT_K": -1}
