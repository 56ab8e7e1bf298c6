"""Where kernels run: a CUDA GPU, or the CPU through the Triton interpreter.

`--device cpu` is a first-class mode: Triton kernels run on CPU tensors with TRITON_INTERPRET=1.
The variable is read when `@triton.jit` decorates a function, so it must be set before any kernel
module is imported; `use_device` does that and refuses when it is already too late.
"""

from __future__ import annotations

import os
import sys

import torch

DEVICES = ("cuda", "cpu")
# Said once by every command that prints a figure measured on the CPU.
CPU_TIMING_NOTE = ("device cpu: kernels run in the Triton interpreter; timings are host-clock "
                   "figures that say nothing about a GPU")


class DeviceError(RuntimeError):
    """The requested device cannot be used on this machine."""


def cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve_device(requested: str | None) -> str:
    """Map 'auto'/None to the best available device and validate an explicit choice."""
    if requested in (None, "", "auto"):
        return "cuda" if cuda_available() else "cpu"
    if requested not in DEVICES:
        raise DeviceError(f"unknown device {requested!r}; choose one of: cuda, cpu")
    if requested == "cuda" and not cuda_available():
        raise DeviceError("--device cuda was asked for, but no CUDA GPU is visible to torch")
    return requested


def device_choice_line(device: str) -> str:
    """Why a command without --device runs where it does."""
    if device == "cuda":
        return (f"device: cuda, {torch.cuda.get_device_name()} (a GPU is visible; --device cpu "
                "runs in the Triton interpreter instead)")
    return ("device: cpu, since torch sees no CUDA GPU: kernels run in the Triton interpreter, "
            "about a thousand times slower than a GPU, with timings that say nothing about one")


def interpreter_env() -> dict[str, str]:
    """Environment entries that make Triton interpret kernels on the CPU."""
    return {"TRITON_INTERPRET": "1"}


def use_device(device: str) -> None:
    """Prepare this process to run Triton kernels on `device` (sets the interpreter for cpu)."""
    if device != "cpu":
        return
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    os.environ.update(interpreter_env())
    from autokernel.interpreter_compat import patch_triton_interpreter

    patch_triton_interpreter()
    # Kernels decorated before this point were compiled for a GPU and cannot run on CPU tensors.
    jitted = [m for m in list(sys.modules) if m.startswith("autokernel.kernels.")]
    if jitted:
        raise DeviceError(
            "TRITON_INTERPRET was set after Triton kernels were imported "
            f"({', '.join(sorted(jitted))}); start a fresh process with --device cpu"
        )


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
