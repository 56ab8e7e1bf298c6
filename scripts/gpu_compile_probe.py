"""Why is a patched model no faster under torch.compile? Graph breaks, recompiles, and where the
compiled forward's time goes, original against patched.

    python scripts/gpu_compile_probe.py RUN_DIR [--calls 50]

Loads the run's model as `autokernel verify` does, and a second build patched with the run's
kernels. Compiles both (Inductor, default mode) and reports, per build:
- Dynamo's counters after the compile and the timed calls: frames compiled, graph breaks (with
  their reasons), recompiles;
- host µs per forward, back to back without a synchronize (the launch path) and with one after
  each call (what verify's protocol sees);
- device time of one forward from the profiler: the sum of its GPU kernels' durations, the number
  of kernels, and the ten longest kernels by total time;
- the same for eager original and eager patched, for comparison;
- a cProfile of the patched compiled forward (`--cprofile` rows, 0 for none).
Prints markdown tables; µs per forward.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpu_route_cost import per_call_us  # this folder: the same host-time protocol


def device_profile(fn: Any) -> tuple[float, int, list[tuple[str, float, int]]]:
    """(device µs of one call, kernels launched, top kernels by total µs)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time
            counts[event.name] += 1
    top = [(name[:70], us, counts[name]) for name, us in totals.most_common(10)]
    return sum(totals.values()), sum(counts.values()), top


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--cprofile", type=int, default=20,
                        help="rows of a cProfile (by own time) of the patched compiled forward")
    args = parser.parse_args()
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    import autokernel
    from autokernel.integrate.loader import load_run_model, open_run
    from autokernel.profiling.model_loader import call_forward

    run = open_run(args.run_dir)
    original = load_run_model(run, "cuda").model
    patched = load_run_model(run, "cuda", check_forward=False).model
    patched.load_state_dict(original.state_dict())
    inputs = load_run_model(run, "cuda", check_forward=False).inputs
    report = autokernel.load(args.run_dir).patch(patched)
    print(f"patch: {report}", file=sys.stderr)

    builds = {"eager": original, "patched eager": patched}
    rows, tops, dynamo = [], {}, {}
    with torch.no_grad():
        for name in ("compile", "patched compile"):
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(original if name == "compile" else patched)
            began = time.perf_counter()
            call_forward(compiled, inputs)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - began
            builds[name] = compiled
            per_call_us(lambda c=compiled: call_forward(c, inputs), 10, False)
            dynamo[name] = (compile_s, {k: dict(v) for k, v in counters.items()
                                        if k in ("stats", "graph_break", "recompiles")})
        for name, build in builds.items():
            def forward(b: Any = build) -> Any:
                return call_forward(b, inputs)

            device_us, kernels, top = device_profile(forward)
            rows.append(f"| {name} | {per_call_us(forward, args.calls, False):.1f} | "
                        f"{per_call_us(forward, args.calls, True):.1f} | {device_us:.1f} | "
                        f"{kernels} |")
            tops[name] = top

    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}; run {args.run_dir}")
    print("\n| build | host µs/forward (async) | synced µs/forward | device µs (profiler) | "
          "kernels |\n|---|---|---|---|---|")
    print("\n".join(rows))
    for name, (compile_s, stats) in dynamo.items():
        print(f"\n{name}: first call {compile_s:.1f} s; dynamo counters {stats}")
    for name, top in tops.items():
        print(f"\n{name}: top kernels\n| kernel | µs | calls |\n|---|---|---|")
        print("\n".join(f"| {k} | {us:.1f} | {n} |" for k, us, n in top))
    if args.cprofile:
        profiled = cProfile.Profile()
        with torch.no_grad():
            profiled.enable()
            for _ in range(args.calls):
                call_forward(builds["patched compile"], inputs)
            profiled.disable()
        for order in ("tottime", "cumulative"):
            stream = io.StringIO()
            pstats.Stats(profiled, stream=stream).sort_stats(order).print_stats(args.cprofile)
            print(f"\npatched compile, {args.calls} forwards, by {order}:\n"
                  + stream.getvalue()[-7000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
