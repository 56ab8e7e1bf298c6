"""autokernel: profile a PyTorch model, optimize its hottest GPU kernels overnight, splice them
back."""

import os as _os
from typing import Any

__version__ = "0.1.0"

if _os.environ.get("TRITON_INTERPRET") == "1":
    # Every process that interprets Triton (tests, harness workers, CLI runs) imports this first.
    from autokernel.interpreter_compat import patch_triton_interpreter

    patch_triton_interpreter()


def load(directory: str, device: str | None = None) -> Any:
    """The finished kernels of an `autokernel run` workspace, ready for `.patch(model)`.

        kernels = autokernel.load("autokernel_runs/llama-20250101-010101")
        patched = kernels.patch(model)  # routes matching modules and calls, in place
        patched.report.lines()          # what was routed, and what fell back to PyTorch
        patched.unpatch()               # every module gets its own forward back

    torch and Triton are imported here, not when `autokernel` is imported.
    """
    from autokernel.integrate.loader import load as load_run

    return load_run(directory, device=device)
