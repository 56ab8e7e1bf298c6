"""Where does a patched model's host time go? Per-call cost of each routed module, and a profile.

    python scripts/gpu_route_cost.py RUN_DIR [--calls 300]

Loads the run's model as `autokernel verify` does, then for every routed module (the first one
of each kernel) times `calls` back-to-back calls of the original forward and of the patched one
on the input the module sees in the model, without synchronizing between calls (host time per
call while the GPU keeps up: the launch path's cost), and with a synchronize after each call.
Then the whole forward, the same two ways, original and patched, and a cProfile of the patched
module calls (the top functions by own time). Last, `autokernel verify`'s own protocol
(`time_synchronous_calls`: each forward alone, synchronized, rotating order) on the original and
on a second build of the model patched as verify patches it, with and without its L2 flush, and
the quartiles of each, so a bimodal figure shows. Prints tables; figures are µs per call.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any


def per_call_us(fn: Any, calls: int, sync_each: bool) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    import torch

    import autokernel
    from autokernel.integrate.loader import load_run_model, open_run
    from autokernel.profiling.model_loader import call_forward

    run = open_run(args.run_dir)
    loaded = load_run_model(run, "cuda")
    model, inputs = loaded.model, loaded.inputs
    seen: dict[str, tuple[Any, ...]] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, a, name=n: seen.setdefault(name, a))
             for n, m in model.named_modules()]
    with torch.no_grad():
        call_forward(model, inputs)
    for h in hooks:
        h.remove()

    rows = []
    with torch.no_grad():
        original_forward = {
            "async": per_call_us(lambda: call_forward(model, inputs), args.calls // 10, False),
            "sync": per_call_us(lambda: call_forward(model, inputs), args.calls // 10, True),
        }
        patch = autokernel.load(args.run_dir).patch(model)
        routed = [(n, m) for n, m in model.named_modules()
                  if type(m.__dict__.get("forward")).__name__ == "_Route"]
        patched_forward = {
            "async": per_call_us(lambda: call_forward(model, inputs), args.calls // 10, False),
            "sync": per_call_us(lambda: call_forward(model, inputs), args.calls // 10, True),
        }
        profiled = cProfile.Profile()
        for name, module in routed[:3]:
            x = seen[name]
            route = module.__dict__["forward"]
            figures = {}
            for label, fn in (("original", lambda r=route, x=x: r.original(*x)),
                              ("patched", lambda m=module, x=x: m(*x))):
                figures[label] = (per_call_us(fn, args.calls, False),
                                  per_call_us(fn, args.calls, True))
            profiled.enable()
            for _ in range(args.calls):
                module(*x)
            profiled.disable()
            torch.cuda.synchronize()
            shape = "x".join(map(str, x[0].shape)) if x and hasattr(x[0], "shape") else "?"
            rows.append(f"| {name} ({type(module).__name__}) | {shape} | "
                        f"{figures['original'][0]:.1f} | {figures['patched'][0]:.1f} | "
                        f"{figures['original'][1]:.1f} | {figures['patched'][1]:.1f} |")
        # The whole patched forward too: a fusion routed through the Router's mode (add_rmsnorm)
        # has no module route to profile alone.
        profiled.enable()
        for _ in range(args.calls // 10):
            call_forward(model, inputs)
        profiled.disable()
        torch.cuda.synchronize()
        patch.unpatch()
        protocol_rows = verify_protocol(run, model, inputs, args.run_dir)

    stream = io.StringIO()
    pstats.Stats(profiled, stream=stream).sort_stats("tottime").print_stats(18)
    print(stream.getvalue()[-6000:])
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"python {sys.version.split()[0]}; run {args.run_dir}")
    print("| module | input | original async µs | patched async µs | original synced µs | "
          "patched synced µs |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"| whole forward | | {original_forward['async']:.1f} | {patched_forward['async']:.1f} "
          f"| {original_forward['sync']:.1f} | {patched_forward['sync']:.1f} |")
    print()
    print("| verify protocol | contestant | q25 µs | median µs | q75 µs |")
    print("|---|---|---|---|---|")
    print("\n".join(protocol_rows))
    return 0


def verify_protocol(run: Any, model: Any, inputs: Any, run_dir: Path) -> list[str]:
    import statistics

    import torch

    import autokernel
    from autokernel.harness.timing import make_flush_buffer, time_synchronous_calls
    from autokernel.integrate.loader import load_run_model
    from autokernel.profiling.model_loader import call_forward

    fresh = load_run_model(run, "cuda", check_forward=False).model
    fresh.load_state_dict(model.state_dict())
    autokernel.load(run_dir).patch(fresh)
    contestants = [("eager", lambda: call_forward(model, inputs)),
                   ("patched (fresh build)", lambda: call_forward(fresh, inputs))]
    rows = []
    # verify compiles the patched model before it times the eager contestants: timed again
    # after that, to see whether a compiled copy slows the eager patched model down.
    for when in ("before torch.compile", "after torch.compile"):
        if when.startswith("after"):
            compiled = torch.compile(fresh)
            for _ in range(3):
                call_forward(compiled, inputs)
        for label, flush in (("L2 flush", make_flush_buffer(torch.device("cuda"))),
                             ("no flush", None)):
            for _, fn in contestants:
                fn()
            samples = time_synchronous_calls(contestants, 200, torch.device("cuda"), flush)
            for name, sample in samples.items():
                q = statistics.quantiles(sample.latency_us, n=4)
                rows.append(f"| {label}, {when} | {name} | {q[0]:.1f} | {q[1]:.1f} | "
                            f"{q[2]:.1f} |")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
