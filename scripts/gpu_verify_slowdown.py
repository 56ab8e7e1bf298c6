"""Which step of verify slows eager host code after it: wall time per synchronized forward of
a run's model (eager, patched, patched with compile-transparent routes) after the fp32 oracle's
forward and after the gradient check. Medians of 100 interleaved rounds, no L2 flush.

    python scripts/gpu_verify_slowdown.py RUN_DIR
"""
import statistics
import sys

import torch

import autokernel
from autokernel.harness.timing import time_synchronous_calls
from autokernel.integrate import verify
from autokernel.integrate.accuracy import full_precision
from autokernel.integrate.loader import load_run_model, open_run
from autokernel.profiling.model_loader import call_forward

run = open_run(sys.argv[1])
loaded = load_run_model(run, "cuda")
model, inputs = loaded.model, loaded.inputs
default = load_run_model(run, "cuda", check_forward=False).model
default.load_state_dict(model.state_dict())
autokernel.load(sys.argv[1]).patch(default)
transparent = load_run_model(run, "cuda", check_forward=False).model
transparent.load_state_dict(model.state_dict())
kernels = autokernel.load(sys.argv[1])
kernels.patch(transparent, under_compile="transparent")
contestants = [("eager", lambda: call_forward(model, inputs)),
               ("patched", lambda: call_forward(default, inputs)),
               ("patched transparent", lambda: call_forward(transparent, inputs))]


def measure(stage):
    with torch.no_grad():
        for _, fn in contestants:
            fn()
        samples = time_synchronous_calls(contestants, 100, torch.device("cuda"), None)
    print(f"{stage:40s} " + "  ".join(f"{n} {statistics.median(s.latency_us):7.1f}"
                                       for n, s in samples.items()), flush=True)


measure("fresh")
oracle = load_run_model(run, "cuda", check_forward=False).model
oracle.load_state_dict(model.state_dict())
oracle = oracle.to(torch.float32)
oracle_inputs = [x.float() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs]
with torch.no_grad(), full_precision():
    call_forward(oracle, oracle_inputs)
measure("after the fp32 oracle's forward")
log = verify.VerifyLog(emit=lambda line: None)
with torch.no_grad():
    out = call_forward(model, inputs)
verify._gradient_check(model, transparent, oracle, inputs, oracle_inputs, out, "fp16", log)
measure("after verify's gradient check")
del oracle
measure("after del oracle")
