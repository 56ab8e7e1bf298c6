"""Issue 25's acceptance on a GPU: several models through `in-context` in one device call, and
one table of what each delivered against eager and the faster torch.compile mode.

    python -m autokernel.benchmarks in-context-models [--hours 0.015] [--budget 4]
        [--only TYPES] [--model-timeout 240] [--kernelbench-sizes] MODEL [MODEL ...]

Each model runs the `in-context` benchmark's steps (benchmarks/shell/in_context.sh: a short
`autokernel run`, `verify`, `report`, the exported module's `optimize`), one after another, each
within --model-timeout seconds, its files under OUT/models/NAME/. After each model its verify.json
is read and the summary rewritten (OUT/summary.md, OUT/summary.json), and OUT/models.tar.gz
re-made: a device call that ends early still brings back every finished model (the device tool
returns 8 files: the summary, the archive and the environment).

Per model, from verify.json (all figures verify measured side by side in its paired batches):
- the delivered mode and its kernels, and the kernels each mode kept in;
- delivered vs eager, and vs the faster of torch.compile and reduce-overhead, in wall time
  (verify's paired ratio with its 95% interval) and in device time (the deliveries' medians);
- patched eager vs eager in wall time (eager with the kernels eager keeps, against none);
- the checks of issue 25: the delivery no slower than the faster compile mode in wall and device
  time (within verify's stated noise), patched eager no slower than eager.

--kernelbench-sizes: for a model file that names its KernelBench problem's sizes as module
constants `KERNELBENCH_<NAME>` beside its own `<NAME>` (tests/fixtures/kernelbench/ does: small
sizes for CPU tests), run a copy with `<NAME> = KERNELBENCH_<NAME>` appended, so get_inputs() and
get_init_inputs() build the problem at its real size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from autokernel.benchmarks.record import REPO
from autokernel.benchmarks.registry import SHELL_DIR
from autokernel.versions import source_commit

COMPILE_MODES = ("compile", "reduce-overhead")
# `KERNELBENCH_A, KERNELBENCH_B = ...` (one name or several on the left of one assignment)
KERNELBENCH_ASSIGNMENT = re.compile(r"^(KERNELBENCH_\w+(?:\s*,\s*KERNELBENCH_\w+)*)\s*=",
                                    re.MULTILINE)


def _assigned(name: str, source: str) -> bool:
    """Does a top-level assignment bind `name` (alone or among a tuple's names)?"""
    return re.search(rf"^(?:\w+\s*,\s*)*{name}(?:\s*,\s*\w+)*\s*=(?!=)", source,
                     re.MULTILINE) is not None


def at_kernelbench_size(source: str) -> str | None:
    """The model file's source with every `<NAME>` that has a `KERNELBENCH_<NAME>` set to it
    (appended, so get_inputs() and get_init_inputs() read them at call time); None when the
    file names no such pair."""
    names = [n.strip().removeprefix("KERNELBENCH_")
             for m in KERNELBENCH_ASSIGNMENT.finditer(source) for n in m.group(1).split(",")]
    paired = [n for n in names if _assigned(n, source)]
    if not paired:
        return None
    lines = "\n".join(f"{n} = KERNELBENCH_{n}" for n in paired)
    return (source.rstrip("\n") + "\n\n# in-context-models --kernelbench-sizes: the problem's "
            f"own sizes\n{lines}\n")


def _paired(vs: dict[str, Any], mode: str) -> dict[str, float] | None:
    entry = vs.get(mode) or {}
    paired = entry.get("paired")
    if paired:
        return {k: paired[k] for k in ("estimate", "low", "high")}
    if entry.get("ratio") is not None:
        return {"estimate": entry["ratio"], "low": None, "high": None}
    return None


def _median_us(deliveries: list[dict[str, Any]], mode: str, kernels: list[str],
               clock: str) -> float | None:
    """The median per forward (`clock`: "device" or "wall") of the delivery `mode` + `kernels`."""
    for row in deliveries:
        delivery = row.get("delivery", {})
        if delivery.get("mode") == mode and list(delivery.get("kernels", [])) == list(kernels):
            return (row.get(clock) or {}).get("median_us")
    return None


def summarize(verify: dict[str, Any], name: str) -> dict[str, Any]:
    """One model's row from its verify.json (see the module docstring)."""
    delivery = verify.get("delivery") or {}
    deliveries = verify.get("deliveries") or []
    selection = verify.get("selection") or {}
    noise = verify.get("speedup") or {}
    row: dict[str, Any] = {"model": name, "passed": verify.get("passed"),
                           "failure": verify.get("failure"),
                           "delivered": delivery.get("mode"),
                           "kernels": list(delivery.get("kernels", [])),
                           "kept_in": {mode: list(tags) for mode, tags in selection.items()},
                           "finished": [k.get("tag") for k in verify.get("kernels", [])]}
    if not delivery:
        return row
    vs = delivery.get("vs") or {}
    compiled = {mode: _paired(vs, mode) for mode in COMPILE_MODES}
    compiled = {mode: r for mode, r in compiled.items() if r is not None}
    # The faster compile mode is the one the delivery gains least over.
    faster = min(compiled, key=lambda m: compiled[m]["estimate"]) if compiled else None
    row["vs_eager_wall"] = (vs.get("eager") or {}).get("ratio")
    row["faster_compile_mode"] = faster
    row["vs_compile_wall"] = compiled.get(faster) if faster else None
    delivered_device = _median_us(deliveries, delivery["mode"], row["kernels"], "device")
    compile_device = [_median_us(deliveries, m, [], "device") for m in COMPILE_MODES]
    compile_device = [d for d in compile_device if d]
    row["device_us"] = {"delivered": delivered_device,
                        "faster_compile": min(compile_device) if compile_device else None}
    row["vs_compile_device"] = (min(compile_device) / delivered_device
                                if compile_device and delivered_device else None)
    eager_kernels = list(selection.get("eager", []))
    eager_none = _median_us(deliveries, "eager", [], "wall")
    eager_patched = (_median_us(deliveries, "eager", eager_kernels, "wall") if eager_kernels
                     else eager_none)
    row["patched_eager_vs_eager_wall"] = (eager_none / eager_patched
                                          if eager_none and eager_patched else None)
    device_noise = (noise.get("device") or {}).get("noise") or 0.0
    wall = row["vs_compile_wall"]
    row["checks"] = {
        # Paired wall ratio: not below 1 beyond its interval.
        "delivery_wall_vs_faster_compile": bool(wall and (wall["high"] if wall["high"] is not None
                                                          else wall["estimate"]) >= 1.0),
        "delivery_device_vs_faster_compile": bool(row["vs_compile_device"] is not None and
                                                  row["vs_compile_device"] >= 1.0 - device_noise),
        "patched_eager_vs_eager": bool(row["patched_eager_vs_eager_wall"] is not None and
                                       (not eager_kernels or
                                        row["patched_eager_vs_eager_wall"] >= 1.0)),
    }
    row["device_noise"] = device_noise
    return row


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}×"


def _interval(paired: dict[str, Any] | None) -> str:
    if not paired:
        return "–"
    if paired.get("low") is None:
        return _ratio(paired["estimate"])
    return f"{paired['estimate']:.3f}× ({paired['low']:.3f}–{paired['high']:.3f})"


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "",
             "| model | delivered | vs eager (wall) | vs faster compile mode (wall, 95% CI) | "
             "vs it (device) | patched eager vs eager (wall) | kept in per mode | checks |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("delivered"):
            lines.append(f"| {r['model']} | – (verify: {r.get('failure') or 'no verify.json'}) "
                         "| | | | | | |")
            continue
        kept = "; ".join(f"{m}: {', '.join(t) or 'none'}" for m, t in r["kept_in"].items())
        checks = "all met" if all(r["checks"].values()) else "NOT met: " + ", ".join(
            k for k, v in r["checks"].items() if not v)
        delivered = r["delivered"] + (f" + {', '.join(r['kernels'])}" if r["kernels"] else "")
        lines.append(
            f"| {r['model']} | {delivered} | {_ratio(r['vs_eager_wall'])} | "
            f"{r['faster_compile_mode']}: {_interval(r['vs_compile_wall'])} | "
            f"{_ratio(r['vs_compile_device'])} | {_ratio(r['patched_eager_vs_eager_wall'])} | "
            f"{kept} | {checks} |")
    return "\n".join(lines) + "\n"


def _write(out: Path, rows: list[dict[str, Any]], header: str) -> None:
    (out / "summary.json").write_text(json.dumps({"header": header, "models": rows}, indent=2)
                                      + "\n")
    (out / "summary.md").write_text(markdown(rows, header))
    models = out / "models"
    if models.is_dir():
        with tarfile.open(out / "models.tar.gz", "w:gz") as archive:
            archive.add(models, arcname="models")


def run_in_context(command: list[str], env: dict[str, str], log: Path, timeout_s: float
                   ) -> int | str:
    """The in-context steps for one model: their exit status, or "timeout"."""
    with open(log, "wb") as out:
        try:
            return subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def run_model(model: Path, out: Path, hours: str, only: str, budget: str, timeout_s: float,
              kernelbench_sizes: bool, commit: str) -> dict[str, Any]:
    name = model.stem
    folder = out / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    target = model
    if kernelbench_sizes:
        sized = at_kernelbench_size(model.read_text())
        if sized is not None:
            target = folder / model.name
            target.write_text(sized)
    env = dict(os.environ, OUT=str(folder), PYTHON=sys.executable, COMMIT=commit)
    code = run_in_context(["bash", str(SHELL_DIR / "in_context.sh"), str(target), hours, only,
                           budget], env, folder / "in_context.log", timeout_s)
    verify = folder / f"{target.stem}-verify.json"
    if not verify.is_file():
        return {"model": name, "delivered": None,
                "failure": f"no verify.json (in_context.sh exit {code}; see in_context.log)"}
    return summarize(json.loads(verify.read_text()), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--hours", default="0.015", help="each run's --hours")
    parser.add_argument("--only", default="", help="each run's --only ('' = the plan's targets)")
    parser.add_argument("--budget", default="4", help="verify's --budget (seconds per batch)")
    parser.add_argument("--model-timeout", type=float, default=240.0, help="seconds per model")
    parser.add_argument("--kernelbench-sizes", action="store_true",
                        help="run KERNELBENCH_<NAME> sizes where a file names them")
    parser.add_argument("--out", type=Path, default=None, help="default: $OUT or ./gpu-out")
    args = parser.parse_args(argv)
    out = args.out or Path(os.environ.get("OUT") or "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "models", ignore_errors=True)
    commit = os.environ.get("COMMIT") or source_commit(REPO)
    header = (f"in-context-models, commit {commit}: "
              f"--hours {args.hours}, verify --budget {args.budget}"
              + (f", --only {args.only}" if args.only else ""))
    rows: list[dict[str, Any]] = []
    for model in args.models:
        print(f"== {model}", flush=True)
        rows.append(run_model(model.resolve(), out, args.hours, args.only, args.budget,
                              args.model_timeout, args.kernelbench_sizes, commit))
        _write(out, rows, header)
        print(json.dumps(rows[-1]), flush=True)
    shutil.rmtree(out / "models", ignore_errors=True)  # archived in models.tar.gz
    print(markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
