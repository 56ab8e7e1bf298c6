"""What every benchmark's record carries: the GPU, the software and the commit it was measured
with. The suite writes it beside the benchmark's output before the benchmark runs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def environment(benchmark: str, argv: list[str]) -> dict[str, Any]:
    """The GPU (name, driver, SM clocks, from nvidia-smi; none on a CPU machine), the software
    versions, the commit ($COMMIT wins: a copied tree may carry a stale .git) and the command."""
    from autokernel.versions import software_versions, source_commit

    return {"benchmark": benchmark, "command": " ".join(
                ["python -m autokernel.benchmarks", benchmark, *argv]),
            "gpu": _gpu(), "versions": software_versions(), "commit": source_commit(REPO),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _gpu() -> dict[str, str] | None:
    query = "name,driver_version,clocks.sm,clocks.max.sm"
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return dict(zip(query.split(","), (v.strip() for v in first.split(",")))) or None


def write_environment(record: dict[str, Any], folder: Path) -> Path:
    """`<folder>/<benchmark>-env.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['benchmark']}-env.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
