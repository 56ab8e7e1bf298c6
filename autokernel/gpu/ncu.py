"""Nsight Compute metrics of a kernel.py's launches, where the machine allows it.

Off by default: profiling replays each kernel many times and needs a CUDA device, the `ncu`
binary and permission to read the GPU's counters. `ncu_status` says whether it may run here and,
where it may not, why, in one line the prompt shows. With `AUTOKERNEL_NCU=1` on such a machine,
`collect` runs `kernel_fn` once to compile it, then once more inside an NVTX range that alone is
profiled, in a child process under `ncu --csv --page raw`, and `parse_ncu_csv` reads the table.

Command line (the profiled child): python -m autokernel.gpu.ncu _run kernel.py 4096x4096 fp16
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NCU_ENV = "AUTOKERNEL_NCU"
NVTX_RANGE = "autokernel_profile"
DEFAULT_TIMEOUT_S = 120.0
# (metric, how the prompt names it), in the order the prompt shows them. A label with "{}" takes
# the value; percentages and counts are printed as they are, times in us and bytes in MB.
METRICS: tuple[tuple[str, str], ...] = (
    ("gpu__time_duration.sum", "{} duration"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput {} of peak"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput {} of peak"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy {}"),
    ("lts__t_sector_hit_rate.pct", "L2 hit rate {}"),
    ("dram__bytes.sum", "{} moved to/from DRAM"),
    ("launch__registers_per_thread", "{} registers/thread"),
)


@dataclass
class KernelMetrics:
    kernel: str
    values: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)


def ncu_enabled() -> bool:
    return os.environ.get(NCU_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def ncu_status(device: str) -> tuple[bool, str]:
    """(whether metrics will be collected, the one-line note to show when they are not)."""
    if device != "cuda":
        return False, "Nsight Compute: not collected (CPU run: no CUDA device to profile)."
    if shutil.which("ncu") is None:
        return False, "Nsight Compute: not collected (no `ncu` on this machine's PATH)."
    if not ncu_enabled():
        return False, (f"Nsight Compute: `ncu` is installed but collection is off "
                       f"(set {NCU_ENV}=1 to profile the best kernel once per keep).")
    return True, ""


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")  # ncu may print thousands separators
    try:
        return float(cleaned)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """Launches in `ncu --csv` output, one `KernelMetrics` each, in launch order.

    Reads both layouts: `--page raw` (a header of metric names, a units row, then one row per
    launch) and the default details page (one row per metric: "Metric Name", "Metric Unit",
    "Metric Value"). ncu's own `==PROF==` lines and the program's output are skipped; numbers may
    carry thousands separators.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows or "Kernel Name" not in rows[0]:
        return []
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    name_at = header.index("Kernel Name")
    wanted = {metric for metric, _ in METRICS}
    if "Metric Name" in header:  # the details layout
        at = {h: header.index(h) for h in ("ID", "Metric Name", "Metric Unit", "Metric Value")}
        launches: dict[str, KernelMetrics] = {}
        for row in body:
            metric = row[at["Metric Name"]]
            launch = launches.setdefault(row[at["ID"]], KernelMetrics(row[name_at]))
            if metric in wanted and (value := _number(row[at["Metric Value"]])) is not None:
                launch.values[metric] = value
                launch.units[metric] = row[at["Metric Unit"]]
        return list(launches.values())
    columns = [(i, h) for i, h in enumerate(header) if h in wanted]
    units: dict[str, str] = {}
    if body and not body[0][name_at].strip():  # the units row has no kernel name
        units = {h: body[0][i] for i, h in columns}
        body = body[1:]
    return [KernelMetrics(row[name_at],
                          {h: v for i, h in columns if (v := _number(row[i])) is not None},
                          dict(units)) for row in body]


_TO_US = {"second": 1e6, "s": 1e6, "msecond": 1e3, "ms": 1e3, "usecond": 1.0, "us": 1.0,
          "nsecond": 1e-3, "ns": 1e-3}
_TO_MB = {"byte": 1e-6, "bytes": 1e-6, "Kbyte": 1e-3, "KB": 1e-3, "Mbyte": 1.0, "MB": 1.0,
          "Gbyte": 1e3, "GB": 1e3}


def _scaled(value: float, unit: str) -> str:
    if unit in _TO_US:
        return f"{value * _TO_US[unit]:.1f} us"
    return f"{value * _TO_MB[unit]:.1f} MB"


def _value_text(metric: str, value: float, unit: str) -> str:
    if unit == "%" or ".pct" in metric:
        return f"{value:.0f}%"
    if unit in _TO_US or unit in _TO_MB:
        return _scaled(value, unit)
    return f"{value:g}"


def describe_metrics(metrics: Sequence[KernelMetrics], limit: int = 3) -> list[str]:
    """One line per profiled launch: the metrics of METRICS that ncu reported."""
    lines = []
    for launch in metrics[:limit]:
        parts = [label.format(_value_text(metric, launch.values[metric],
                                               launch.units.get(metric, "")))
                 for metric, label in METRICS if metric in launch.values]
        lines.append(f"- {launch.kernel}: " + ", ".join(parts))
    if len(metrics) > limit:
        lines.append(f"- ... {len(metrics) - limit} more launches")
    return lines


def collect(path: Path, shape: Sequence[int], dtype: str,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[KernelMetrics], str]:
    """Profile one call of the kernel file's `kernel_fn` at `shape`: (metrics, error)."""
    exe = shutil.which("ncu")
    if exe is None:
        return [], "no ncu"
    command = [exe, "--csv", "--page", "raw", "--print-units", "base",
               "--metrics", ",".join(m for m, _ in METRICS),
               "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--target-processes", "all",
               sys.executable, "-m", "autokernel.gpu.ncu", "_run", str(path),
               "x".join(str(int(d)) for d in shape), dtype]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"ncu took over {timeout_s:g} s"
    metrics = parse_ncu_csv(done.stdout)
    if not metrics:
        tail = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return [], f"ncu exit {done.returncode}: {tail[-1][:200] if tail else 'no output'}"
    return metrics, ""


def _run(path: str, shape_text: str, dtype_name: str) -> None:
    """The profiled program: compile, then one call inside the NVTX range ncu profiles."""
    import torch

    from autokernel.aot import load_module
    from autokernel.kernelfile import ENTRY_POINT, read_kernel_file
    from autokernel.ops import get_spec
    from autokernel.ops.spec import parse_dtype

    spec = get_spec(read_kernel_file(path).kernel_type)
    shape = spec.parse_shape(tuple(int(d) for d in shape_text.split("x")))
    inputs = spec.make_inputs(shape, parse_dtype(dtype_name), "cuda",
                              torch.Generator(device="cuda").manual_seed(0))
    kernel_fn = getattr(load_module(path), ENTRY_POINT)
    kernel_fn(*inputs)  # compiles; not profiled
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    kernel_fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "_run":
        _run(*sys.argv[2:])
    else:
        sys.exit("usage: python -m autokernel.gpu.ncu _run kernel.py SHAPE DTYPE")
