"""CUDA C++: kernel files whose C++ (CUDA_SOURCE, or a CUDA_FILE beside them) nvcc builds in the
trusted runner; the candidate loads the build through ctypes and launches its `extern "C"`
launchers through `Extension.launch` (`runtime`). `harness.py` says the path step by step."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from autokernel.backends.interface import (AotResult, Build, BuildError, KernelBackend,
                                           LaunchCounter, Violation)


class CudaBackend(KernelBackend):
    name = "cuda"
    cpu_refusal = ("needs a GPU: a CUDA C++ kernel cannot run on --device cpu (the CPU "
                   "interpreter runs Triton only); `python -m autokernel.aot check` compiles it "
                   "for sm_90a here")

    @property
    def runtime_modules(self) -> dict[str, frozenset[str]]:  # type: ignore[override]
        from autokernel.cuda.scan import RUNTIME_MODULES

        return RUNTIME_MODULES

    def sidecar_text(self, info: Any, path: Path) -> str | None:
        from autokernel.kernelfile import cuda_source_text

        return cuda_source_text(info, path) if info.cuda_file is not None else None

    def scan_parts(self, tree: ast.Module, sidecar_text: str | None) -> list[Violation]:
        from autokernel.cuda.scan import scan_cuda_parts

        return scan_cuda_parts(tree, sidecar_text)

    def build(self, info: Any, path: Path, cache: Path, timeout_s: float,
              target: str | None = None) -> Build:
        from autokernel.cuda.build import CudaBuildError
        from autokernel.cuda.harness import prebuild, prebuilt_entries

        try:
            built = prebuild(info, path, cache, timeout_s, arch=target)
        except CudaBuildError as exc:  # build.py imports no autokernel module: export inlines it
            raise BuildError(f"nvcc: {exc}", exc.detail) from None
        return Build(entries=prebuilt_entries(info, path, built.library), seconds=built.seconds,
                     cached=built.cached, target=built.arch)

    def prepare_candidate(self, entries: list[list[str]]) -> None:
        from autokernel.cuda.harness import prepare_candidate

        prepare_candidate(entries)

    def install_launch_counter(self, monitor: LaunchCounter) -> None:
        """A CUDA C++ file's launches go through `Extension.launch`, which calls one `extern
        "C"` launcher on the current stream: each call counts as a launch, and ghost replay
        skips it. Nothing of torch runs inside it, so it is no `in_launch`: an op recorded
        during it is the candidate's."""
        from autokernel.cuda.runtime import Extension

        original = Extension.launch

        def launch(extension: Any, name: str, *args: Any) -> None:
            recording = monitor.signatures is not None and not monitor.ghost
            if not (monitor.armed or monitor.ghost or recording):
                return original(extension, name, *args)
            if recording and monitor.signatures is not None:
                scalars = tuple(a for a in args if isinstance(a, (bool, int, float)))
                monitor.signatures.append((f"cuda:{name}", repr(sorted(
                    extension.defines.items())), scalars))
            monitor.launches += 1
            monitor.check_stream()
            if monitor.ghost:
                return None
            return original(extension, name, *args)

        launch.__qualname__ = original.__qualname__
        Extension.launch = launch  # type: ignore[method-assign]
        monitor.installed["Extension.launch"] = (Extension, "launch", launch)

    def aot_check(self, path: str | Path, arch: int) -> list[AotResult]:
        from autokernel.cuda.aot import check_cuda_kernel_file

        return check_cuda_kernel_file(path, arch=arch)


BACKEND = CudaBackend()
