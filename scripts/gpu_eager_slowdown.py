"""Which step slows a process's eager host code after it: wall time per synchronized forward of a
run's model, eager and patched (and patched with compile-transparent routes, as verify patches),
after each step. Medians of 100 interleaved rounds, no L2 flush.

    python scripts/gpu_eager_slowdown.py RUN_DIR compile   # a backward, Dynamo, torch.compile
    python scripts/gpu_eager_slowdown.py RUN_DIR verify    # verify's fp32 oracle, gradient check

The figures are in docs/benchmarks/route-cost-h200/.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch

import autokernel
from autokernel.harness.timing import time_synchronous_calls
from autokernel.integrate import verify
from autokernel.integrate.accuracy import full_precision
from autokernel.integrate.loader import load_run_model, open_run
from autokernel.profiling.model_loader import call_forward


def patched_copy(run: Any, run_dir: str, like: torch.nn.Module, under_compile: str) -> Any:
    model = load_run_model(run, "cuda", check_forward=False).model
    model.load_state_dict(like.state_dict())
    autokernel.load(run_dir).patch(model, under_compile=under_compile)
    return model


def measure(stage: str, contestants: list[tuple[str, Callable[[], Any]]]) -> None:
    with torch.no_grad():
        for _, fn in contestants:
            fn()
        samples = time_synchronous_calls(contestants, 100, torch.device("cuda"), None)
    print(f"{stage:45s} " + "  ".join(f"{n} {statistics.median(s.latency_us):7.1f}"
                                       for n, s in samples.items()), flush=True)


def compile_steps(run: Any, model: torch.nn.Module, patched: torch.nn.Module, inputs: Any,
                  step: Callable[[str], None]) -> None:
    out = call_forward(patched, inputs)
    (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    step("after a backward through patched")
    import torch._dynamo  # noqa: F401
    step("after import torch._dynamo")
    compiled_model, compiled_patched = torch.compile(model), torch.compile(patched)
    step("after torch.compile(...) objects made")
    with torch.no_grad():
        call_forward(compiled_model, inputs)
    step("after one compiled call of the plain model")
    with torch.no_grad():
        call_forward(compiled_patched, inputs)
    step("after one compiled call of the patched model")


def verify_steps(run: Any, model: torch.nn.Module, patched: torch.nn.Module, inputs: Any,
                 step: Callable[[str], None]) -> None:
    oracle = load_run_model(run, "cuda", check_forward=False).model
    oracle.load_state_dict(model.state_dict())
    oracle = oracle.to(torch.float32)
    oracle_inputs = [x.float() if torch.is_tensor(x) and x.is_floating_point() else x
                     for x in inputs]
    with torch.no_grad(), full_precision():
        call_forward(oracle, oracle_inputs)
    step("after the fp32 oracle's forward")
    with torch.no_grad():
        out = call_forward(model, inputs)
    verify._gradient_check(model, patched, oracle, inputs, oracle_inputs, out, "fp16",
                           verify.VerifyLog(emit=lambda line: None))
    step("after verify's gradient check")
    del oracle
    step("after del oracle")


def main() -> int:
    run_dir, which = sys.argv[1], sys.argv[2]
    run = open_run(run_dir)
    loaded = load_run_model(run, "cuda")
    model, inputs = loaded.model, loaded.inputs
    patched = patched_copy(run, run_dir, model, "inductor")
    transparent = patched_copy(run, run_dir, model, "transparent")
    contestants = [("eager", lambda: call_forward(model, inputs)),
                   ("patched", lambda: call_forward(patched, inputs)),
                   ("patched transparent", lambda: call_forward(transparent, inputs))]
    measure("fresh", contestants)
    steps = {"compile": compile_steps, "verify": verify_steps}[which]
    steps(run, model, transparent, inputs, lambda stage: measure(stage, contestants))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
