"""autokernel: profile a PyTorch model, optimize its hottest GPU kernels overnight, splice them
back."""

import os as _os
from typing import Any

__version__ = "0.1.0"

if _os.environ.get("TRITON_INTERPRET") == "1":
    # Every process that interprets Triton (tests, harness workers, CLI runs) imports this first.
    from autokernel.interpreter_compat import patch_triton_interpreter

    patch_triton_interpreter()


def load(directory: str, device: str | None = None, all_kernels: bool = False) -> Any:
    """The finished kernels of an `autokernel run` workspace, ready for `.patch(model)` and
    `.optimize(model)`.

        kernels = autokernel.load("autokernel_runs/llama-20250101-010101")
        fast = kernels.optimize(model)  # the delivery `autokernel verify` measured fastest
        y = fast(x)                     # e.g. torch.compile with the kernels that won in it
        patched = kernels.patch(model)  # or: the kernels verify kept for eager mode, in place
        patched.report.lines()          # what was routed, and what fell back to PyTorch
        patched.unpatch()               # every module gets its own forward back

    Only kernels that verify measured to make the model faster are used (before verify: those
    faster than eager PyTorch alone); `all_kernels=True` takes every finished kernel. torch and
    Triton are imported here, not when `autokernel` is imported.
    """
    from autokernel.integrate.loader import load as load_run

    return load_run(directory, device=device, all_kernels=all_kernels)
