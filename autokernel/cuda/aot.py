"""`python -m autokernel.aot check` for a `BACKEND = "cuda"` kernel file, without a GPU.

nvcc compiles the file's C++ with its tunables as defines for the real target (sm_90a for
Hopper, the default), through the same content cache as the harness's build, and ptxas's `-v`
report gives each kernel's registers, spills and static shared memory. Shapes and dtypes do not
change what is compiled (a launcher's templates cover every dtype), so one build checks them all.
"""

from __future__ import annotations

from pathlib import Path

from autokernel.backends.interface import AotResult
from autokernel.cuda.build import CudaBuildError, arch_for_capability
from autokernel.cuda.harness import prebuild
from autokernel.cuda.resources import limit_warnings, parse_ptxas_log
from autokernel.kernelfile import KernelFileError, read_kernel_file

BUILD_TIMEOUT_S = 300


def check_cuda_kernel_file(path: str | Path, arch: int = 90,
                           cache_dir: str | Path | None = None) -> list[AotResult]:
    """One AotResult per compiled kernel, or one failed result carrying nvcc's first errors."""
    target = arch_for_capability(arch // 10, arch % 10)
    try:
        info = read_kernel_file(path)
        built = prebuild(info, path, cache_dir or _cache_dir(), BUILD_TIMEOUT_S, arch=target)
    except (CudaBuildError, KernelFileError) as exc:
        return [AotResult(kernel=Path(path).name, ok=False, error=str(exc), context=target,
                          detail=getattr(exc, "detail", ""))]
    kernels = parse_ptxas_log(built.ptxas_log)
    if not kernels:
        return [AotResult(kernel=Path(path).name, ok=False, context=target,
                          error="nvcc built the library, but it holds no __global__ kernel")]
    seconds = "cached" if built.cached else f"built in {built.seconds:.1f} s"
    results = []
    for kernel in kernels:
        warnings = limit_warnings(kernel, (arch // 10, arch % 10))
        over_limit = [w for w in warnings if "exceeds" in w]  # cannot launch: a failure
        results.append(AotResult(kernel=kernel.kernel, ok=not over_limit,
                                 error="; ".join(over_limit), context=f"{target}, {seconds}",
                                 n_regs=kernel.registers, shared_bytes=kernel.shared_bytes,
                                 local_bytes=kernel.stack_bytes,
                                 warnings=[w for w in warnings if w not in over_limit]))
    return results


def _cache_dir() -> Path:
    from autokernel.cuda.build import default_cache_dir

    return default_cache_dir()
