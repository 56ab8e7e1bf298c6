"""The namespaces whose callables `IdentitySnapshot` holds by identity."""

from __future__ import annotations

import sys
import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel.harness.guards.fallbacks import FallbackRecorder
from autokernel.harness.guards.launches import LaunchMonitor

def harness_namespaces(kernel_type: str) -> dict[str, Any]:
    """What the reference, the stock baselines and the timer rely on."""
    import builtins
    import math
    import time

    import torch.nn.functional as F
    import triton
    import triton.testing
    from triton.runtime import autotuner, jit

    import autokernel.harness.candidate as candidate_module
    import autokernel.harness.channel as channel_module
    import autokernel.harness.compare as compare_module
    import autokernel.harness.grad_context as grad_context_module
    import autokernel.harness.guards as guards_module
    import autokernel.harness.inputs as inputs_module
    import autokernel.harness.timing as timing_module
    import autokernel.ops.spec as spec_module
    import autokernel.reference as reference_module
    from autokernel.ops import get_spec

    op_module = sys.modules[get_spec(kernel_type).stock.__module__]
    namespaces: dict[str, Any] = {
        "builtins": builtins, "time": time, "math": math, "threading": threading,
        "torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
        "torch.TensorBase": torch._C.TensorBase, "torch.linalg": torch.linalg,
        "torch.special": torch.special, "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Stream": torch.cuda.Stream,
        "torch.Generator": torch.Generator,
        "TorchDispatchMode": TorchDispatchMode,
        "triton": triton, "triton.testing": triton.testing, "triton.runtime.jit": jit,
        "triton.runtime.autotuner": autotuner, "JITFunction": jit.JITFunction,
        "Autotuner": autotuner.Autotuner,
        "autokernel.reference": reference_module, "autokernel.ops.spec": spec_module,
        op_module.__name__: op_module,
        "autokernel.harness.compare": compare_module, "autokernel.harness.guards": guards_module,
        "autokernel.harness.timing": timing_module,
        "autokernel.harness.candidate": candidate_module,
        "autokernel.harness.inputs": inputs_module, "autokernel.harness.channel": channel_module,
        "autokernel.harness.grad_context": grad_context_module,
        "LaunchMonitor": LaunchMonitor, "FallbackRecorder": FallbackRecorder,
    }
    # Each guard looks its helpers up in its own module: snapshot every module of the package,
    # as the single guards.py was.
    namespaces.update({name: module for name, module in sorted(sys.modules.items())
                       if name.startswith(f"{guards_module.__name__}.")})
    try:
        from triton.runtime import interpreter
        namespaces["triton.runtime.interpreter"] = interpreter
        namespaces["InterpretedFunction"] = interpreter.InterpretedFunction
        namespaces["GridExecutor"] = interpreter.GridExecutor
    except ImportError:  # pragma: no cover
        pass
    try:
        from triton.compiler import compiler
        namespaces["CompiledKernel"] = compiler.CompiledKernel
    except ImportError:  # pragma: no cover
        pass
    return namespaces
