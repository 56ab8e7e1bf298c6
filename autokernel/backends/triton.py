"""Triton: kernel files in Python, compiled by Triton's JIT at their first launch (nothing to
build ahead), run on the CPU by the Triton interpreter. Launches are counted where Triton's
launch path runs them: `JITFunction.run` (and the interpreter's `InterpretedFunction.run`) and
`CompiledKernel.__getitem__` (a kernel compiled ahead and launched as `kernel[grid](...)`)."""

from __future__ import annotations

from pathlib import Path

from autokernel.backends.interface import AotResult, KernelBackend, LaunchCounter


class TritonBackend(KernelBackend):
    name = "triton"

    def install_launch_counter(self, monitor: LaunchCounter) -> None:
        from triton.runtime.jit import JITFunction

        monitor.wrap_run(JITFunction, "JITFunction.run")
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every triton 3.x has the interpreter
            InterpretedFunction = None  # noqa: N806
        if InterpretedFunction is not None:
            monitor.wrap_run(InterpretedFunction, "InterpretedFunction.run")
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:  # pragma: no cover
            CompiledKernel = None  # noqa: N806
        if CompiledKernel is not None:
            monitor.wrap_getitem(CompiledKernel, "CompiledKernel.__getitem__")

    def aot_check(self, path: str | Path, arch: int) -> list[AotResult]:
        from autokernel.aot import check_kernel_file

        return check_kernel_file(path, arch=arch)


BACKEND = TritonBackend()
