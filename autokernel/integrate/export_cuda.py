"""What `autokernel export` adds for a run with CUDA C++ kernels (`BACKEND = "cuda"`).

A CUDA kernel file imports `load_extension` from `autokernel.cuda.runtime`, which the exported
module must not need. So the export inlines the runtime and its build (nvcc -> content-cached
shared library, `autokernel/cuda/build.py`) with the few helpers they use, registers them under
a module name of its own, and points each CUDA kernel's import there. The first launch then
compiles the kernel for the GPU at hand with nvcc and caches the library under
`${AUTOKERNEL_CACHE_DIR:-~/.cache/autokernel}/cuda/`, as in the run; a later process finds it
there. A CUDA kernel therefore needs nvcc (a CUDA toolkit) where the exported module runs.

A kernel whose C++ lives in a sibling `.cu` file (CUDA_FILE) is refused: an export is one file.
"""

from __future__ import annotations

from pathlib import Path

from autokernel.cuda.scan import RUNTIME_MODULES
from autokernel.kernelfile import CUDA_FILE_NAME, parse_kernel_source

RUNTIME_MODULE = next(iter(RUNTIME_MODULES))
RUNTIME_IMPORT = f"from {RUNTIME_MODULE} import load_extension"
# In dependency order, inlined into the exported module's one namespace after the others
# (text.py, which the build uses too, is always inlined first).
CUDA_INLINED_MODULES = ("files.py", "cuda/defines.py", "cuda/build.py", "cuda/runtime.py")
SHIM_SUFFIX = "_cuda_runtime"

# Run when the exported module is imported: the name the rewritten kernels import from.
SHIM_REGISTRATION = f'''

def _register_cuda_runtime() -> None:
    """The CUDA kernels' `load_extension`, importable under this export's own module name."""
    import sys
    import types

    shim = types.ModuleType(MODULE_PREFIX + {SHIM_SUFFIX!r})
    shim.load_extension = load_extension
    sys.modules[shim.__name__] = shim


_register_cuda_runtime()
'''


class CudaExportError(ValueError):
    """A CUDA kernel the export cannot carry; the message is one line for the user."""


def is_cuda_kernel(source: str) -> bool:
    return parse_kernel_source(source).backend == "cuda"


def rewrite_cuda_sources(sources: dict[str, str], module_prefix: str) -> dict[str, str]:
    """The kernels' sources with each CUDA kernel's runtime import pointed at the export's shim
    (the same line count, so Triton's and tracebacks' line numbers stay right)."""
    rewritten = {}
    for tag, source in sources.items():
        info = parse_kernel_source(source)
        if info.backend != "cuda":
            rewritten[tag] = source
            continue
        if info.cuda_file is not None:
            raise CudaExportError(f"{tag}: its C++ is in {CUDA_FILE_NAME} {info.cuda_file!r}; an "
                                  "export is one file, so inline it as CUDA_SOURCE to export it")
        if source.count(RUNTIME_IMPORT) != 1:
            raise CudaExportError(f"{tag}: a CUDA kernel must import the runtime exactly as "
                                  f"`{RUNTIME_IMPORT}` to be exported")
        rewritten[tag] = source.replace(
            RUNTIME_IMPORT, f"from {module_prefix}{SHIM_SUFFIX} import load_extension")
    return rewritten


def cuda_inlined(package: Path) -> list[tuple[str, Path]]:
    """(name, path) of the modules a CUDA export inlines."""
    return [(name, package / name) for name in CUDA_INLINED_MODULES]
