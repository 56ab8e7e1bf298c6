"""How much is there to find? Every starter configuration a tuner could pick, timed by do_bench.

    python -m autokernel.benchmarks config-sweep --out DIR [--targets rmsnorm:2048x2048 ...]
        [--limit 60]
        [--rep 100] [--edits NAME=VALUE[,NAME=VALUE] ...]

For each target (kernel type and shape, fp16) the starter's TUNABLE_SPACE is enumerated: the
starter's own configuration, all its one-step neighbours, then random configurations up to
--limit (seeded). Each configuration is written with `set_tunables` (the tuner's own edit), loaded,
checked against the reference at the shape, and timed with `triton.testing.do_bench` (L2 cleared
before every call, median over --rep ms). Configurations whose launches are the starter's own are
timed too: their spread is the noise floor. Eager PyTorch and torch.compile of the reference are
timed beside them.

This is ground truth for the loop's keep decisions: if the best configuration is within a percent
of the starter, a short tuner run cannot keep anything on that target however good its timing is.
With --edits, only the starter and those edits of it are timed.
Writes sweep.json and sweep.md under --out and prints the markdown last.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autokernel.versions import source_commit

DEFAULT_TARGETS = (
    # The Mistral-style decoder's memory-bound targets (hidden 2048, 2048 tokens) ...
    "rmsnorm:2048x2048", "rotary_embedding:1x16x2048x128",
    # ... and the ViT-B/16 encoder's at batch 32 (197 tokens, 12 heads).
    "layernorm:6304x768", "softmax:75648x197",
)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _configs(space: dict[str, list[Any]], start: dict[str, Any], limit: int,
             rng: random.Random) -> list[dict[str, Any]]:
    names = sorted(space)
    picked = [dict(start)]
    seen = {tuple(start[n] for n in names)}
    for name in names:
        values = list(space[name])
        index = values.index(start[name]) if start[name] in values else None
        for step in (-1, 1):
            if index is not None and 0 <= index + step < len(values):
                config = dict(start, **{name: values[index + step]})
                key = tuple(config[n] for n in names)
                if key not in seen:
                    seen.add(key)
                    picked.append(config)
    everything = list(itertools.product(*(space[n] for n in names)))
    rng.shuffle(everything)
    for values in everything:
        if len(picked) >= limit:
            break
        if values not in seen:
            seen.add(values)
            picked.append(dict(zip(names, values)))
    return picked


def _parse_edits(texts: list[str]) -> list[dict[str, Any]]:
    """["MIN_TILE_ELEMENTS=1", "NUM_WARPS=4,ROWS_PER_PROGRAM=2"] -> tunable edits."""
    import ast

    edits = []
    for text in texts:
        pairs = (item.split("=", 1) for item in text.split(","))
        edits.append({name.strip(): ast.literal_eval(value.strip()) for name, value in pairs})
    return edits


def sweep_target(kernel_type: str, shape_text: str, limit: int, rep_ms: int,
                 scratch: Path, edits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    import torch
    from triton.testing import do_bench

    from autokernel.kernelfile import parse_kernel_source, set_tunables
    from autokernel.kernels import starter_path
    from autokernel.ops import get_spec

    spec = get_spec(kernel_type)
    shape = spec.parse_shape(shape_text)
    dtype = torch.float16
    generator = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, dtype, torch.device("cuda"), generator, "normal")
    expected = spec.reference(*inputs)
    tolerance = spec.tolerance(dtype)

    def bench(fn: Any) -> float:
        return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") * 1e3

    eager_us = bench(lambda: spec.stock(*inputs))
    compiled = torch.compile(spec.reference)
    compiled(*inputs)
    compile_us = bench(lambda: compiled(*inputs))

    source = starter_path(kernel_type).read_text()
    info = parse_kernel_source(source)
    if edits:  # the starter and exactly these edits of it
        configs = [dict(info.tunables)] + [dict(info.tunables, **e) for e in edits]
    else:
        configs = _configs(info.space, info.tunables, limit,
                           random.Random(f"sweep:{kernel_type}"))
    rows = []
    began = time.perf_counter()
    for index, config in enumerate(configs):
        changed = {k: v for k, v in config.items() if info.tunables[k] != v}
        path = scratch / f"{kernel_type}_{index}.py"
        path.write_text(set_tunables(source, changed))
        row: dict[str, Any] = {"config": config, "changed": changed}
        try:
            module = _load(path, f"sweep_{kernel_type}_{index}")
            out = module.kernel_fn(*inputs)
            torch.cuda.synchronize()
            if not torch.allclose(out.float(), expected.float(), atol=tolerance.atol,
                                  rtol=tolerance.rtol):
                row["error"] = "wrong answer"
            else:
                row["us"] = bench(lambda m=module: m.kernel_fn(*inputs))
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is a data point
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        rows.append(row)
    timed = [r for r in rows if "us" in r]
    starter_us = rows[0].get("us")
    best = min(timed, key=lambda r: r["us"]) if timed else None
    return {
        "kernel_type": kernel_type, "shape": list(shape), "dtype": "fp16",
        "eager_us": eager_us, "compile_us": compile_us, "starter_us": starter_us,
        "best_us": best["us"] if best else None, "best_changed": best["changed"] if best else None,
        "configs": len(rows), "failed": len(rows) - len(timed),
        "faster_by_2pct": sum(1 for r in timed if starter_us and r["us"] < starter_us / 1.02),
        "faster_by_5pct": sum(1 for r in timed if starter_us and r["us"] < starter_us / 1.05),
        "seconds": time.perf_counter() - began, "rows": rows,
    }


def markdown(results: list[dict[str, Any]], header: list[str]) -> str:
    lines = header + [
        "",
        ("| target | shape | eager µs | compile µs | starter µs | best µs | best/starter | "
         "configs (failed) | ≥2% faster | ≥5% faster | best config's changes |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = (r["starter_us"] / r["best_us"]) if r["starter_us"] and r["best_us"] else None
        lines.append(
            f"| {r['kernel_type']} | {'x'.join(map(str, r['shape']))} | {r['eager_us']:.2f} | "
            f"{r['compile_us']:.2f} | {r['starter_us'] or float('nan'):.2f} | "
            f"{r['best_us'] or float('nan'):.2f} | {ratio or float('nan'):.3f}× | "
            f"{r['configs']} ({r['failed']}) | {r['faster_by_2pct']} | {r['faster_by_5pct']} | "
            f"{r['best_changed']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--targets", nargs="*", default=list(DEFAULT_TARGETS),
                        help="kernel_type:shape, e.g. rmsnorm:2048x2048")
    parser.add_argument("--limit", type=int, default=60, help="configurations per target")
    parser.add_argument("--rep", type=int, default=100, help="do_bench milliseconds per timing")
    parser.add_argument("--edits", nargs="*", default=None,
                        help="time only the starter and these edits, e.g. MIN_TILE_ELEMENTS=1")
    args = parser.parse_args(argv)
    import torch
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    header = [
        "# Starter configuration sweep (do_bench, fp16)",
        "",
        (f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}, triton "
         f"{triton.__version__}, python {sys.version.split()[0]}"),
        f"- commit: {source_commit()}",
        (f"- method: `python -m autokernel.benchmarks config-sweep --limit {args.limit}`; "
         "each configuration is "
         "the starter edited by `set_tunables`, checked against the reference, then `do_bench` "
         f"median (L2 cleared before every call, {args.rep} ms)"),
    ]
    results = []
    torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory(prefix="autokernel-sweep-") as scratch:
        for target in args.targets:
            kernel_type, shape_text = target.split(":")
            result = sweep_target(kernel_type, shape_text, args.limit, args.rep, Path(scratch),
                                  _parse_edits(args.edits or []))
            results.append(result)
            print(f"{target}: starter {result['starter_us']}, best {result['best_us']} "
                  f"({result['best_changed']}) in {result['seconds']:.0f} s",
                  file=sys.stderr, flush=True)
            (args.out / "sweep.json").write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results, header)
    (args.out / "sweep.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
