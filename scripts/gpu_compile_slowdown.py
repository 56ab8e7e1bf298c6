"""Which step slows a process's eager host code: wall time per synchronized forward of a run's
model, eager and patched, after each step (a backward, importing Dynamo, making torch.compile
objects, calling them). Medians of 100 interleaved rounds, no L2 flush.

    python scripts/gpu_compile_slowdown.py RUN_DIR
"""
import statistics
import sys

import torch
import autokernel
from autokernel.harness.timing import time_synchronous_calls
from autokernel.integrate.loader import load_run_model, open_run
from autokernel.profiling.model_loader import call_forward

run = open_run(sys.argv[1])
plain = load_run_model(run, "cuda")
fresh = load_run_model(run, "cuda", check_forward=False).model
fresh.load_state_dict(plain.model.state_dict())
autokernel.load(sys.argv[1]).patch(fresh)
inputs = plain.inputs
contestants = [("eager", lambda: call_forward(plain.model, inputs)),
               ("patched", lambda: call_forward(fresh, inputs))]

def measure(stage):
    with torch.no_grad():
        for _, fn in contestants:
            fn()
        samples = time_synchronous_calls(contestants, 100, torch.device("cuda"), None)
    print(f"{stage:45s} " + "  ".join(f"{n} {statistics.median(s.latency_us):7.1f}"
                                       for n, s in samples.items()), flush=True)

measure("fresh")
out = call_forward(fresh, inputs)
(out[0] if isinstance(out, tuple) else out).float().sum().backward()
measure("after a backward through patched")
import torch._dynamo  # noqa
measure("after import torch._dynamo")
c1 = torch.compile(plain.model)
c2 = torch.compile(fresh)
measure("after torch.compile(...) objects made")
with torch.no_grad():
    call_forward(c1, inputs)
measure("after one compiled call of the plain model")
with torch.no_grad():
    call_forward(c2, inputs)
measure("after one compiled call of the patched model")
