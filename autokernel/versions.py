"""The software a figure was measured with, recorded next to every plan, run and verify result."""

from __future__ import annotations

import platform
from importlib import metadata


def software_versions() -> dict[str, str]:
    """autokernel, Python, torch, triton and CUDA versions (those that are installed)."""
    import torch

    import autokernel

    versions = {"autokernel": autokernel.__version__, "python": platform.python_version(),
                "torch": torch.__version__}
    try:
        versions["triton"] = metadata.version("triton")
    except metadata.PackageNotFoundError:
        pass
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    return versions
