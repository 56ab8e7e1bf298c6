"""The harness's CUDA path: build in the trusted process, load in the sandboxed candidate.

`autokernel.harness.runner.run_bench` judges a `BACKEND = "cuda"` file in this order:

1. the static scan (Python part and C++ text, `autokernel.cuda.scan`);
2. on `--device cpu`: a SKIPPED verdict ("needs a GPU"); `python -m autokernel.aot check`
   compile-checks the file for sm_90a there;
3. on a GPU: `prebuild` compiles CUDA_SOURCE (or CUDA_FILE) with every tunable as a define, for
   the GPU's real target, in the trusted harness process, before anything of the candidate runs;
   a compile error is a CRASH at stage "build" carrying nvcc's first error lines; the build's
   seconds go to `phase_seconds["build"]`, outside the timing.
4. TODO(issue 15, GPU): the sandboxed candidate process calls `prepare_candidate(job)` before it
   imports kernel.py (it registers the built library and forbids builds, so the file can load
   nothing but what was scanned and built), and the launch monitor counts the extension's GPU
   launches (today it counts Triton launches only, so every CUDA kernel would read as "launched
   no kernel"), and ghost replay skips `Extension.launch`. Until that is done and tested on a GPU,
   `run_bench` stops after the build with a SKIPPED verdict that says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autokernel.cuda.build import BuildResult, build_extension
from autokernel.kernelfile import KernelFileInfo, cuda_defines, cuda_source_text

NEEDS_GPU = ("needs a GPU: a CUDA C++ kernel cannot run on --device cpu (the CPU interpreter runs "
             "Triton only); `python -m autokernel.aot check` compiles it for sm_90a here")
GPU_PATH_NOT_WIRED = ("built for {arch} in {seconds:.1f} s{cached}, but the sandboxed CUDA "
                      "candidate path (launch counting, ghost replay) is not wired yet (issue 15)")


def prebuild(info: KernelFileInfo, kernel_path: str | Path, cache_dir: str | Path,
             timeout_s: float, arch: str | None = None) -> BuildResult:
    """Compile the file's C++ with its tunables as defines (raises CudaBuildError)."""
    source_name = info.cuda_file or "CUDA_SOURCE"
    return build_extension(cuda_source_text(info, kernel_path), cuda_defines(info.tunables),
                           arch=arch, cache_dir=cache_dir, timeout_s=timeout_s,
                           source_name=source_name)


def prepare_candidate(info: KernelFileInfo, kernel_path: str | Path, library: str | Path) -> None:
    """In the candidate process, before kernel.py is imported: only the harness's build of the
    file's own source and tunables may load. (Not called yet: see the module docstring.)"""
    from autokernel.cuda import runtime

    defines: dict[str, Any] = cuda_defines(info.tunables)
    runtime.use_prebuilt(cuda_source_text(info, kernel_path), defines, library)
    if info.cuda_file is not None:  # load_extension(CUDA_FILE, ...) names the file, not its text
        runtime.use_prebuilt(info.cuda_file, defines, library)
    runtime.forbid_builds()
