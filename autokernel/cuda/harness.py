"""The harness's CUDA path: build in the trusted runner, load in the sandboxed candidate.

`autokernel.harness.runner.run_bench` judges a `BACKEND = "cuda"` file in this order:

1. the static scan (Python part and C++ text, `autokernel.cuda.scan`);
2. on `--device cpu`: a SKIPPED verdict ("needs a GPU": `backend.CudaBackend.cpu_refusal`);
   `python -m autokernel.aot check`
   compile-checks the file for sm_90a there;
3. on a GPU: `prebuild` compiles CUDA_SOURCE (or CUDA_FILE) with every tunable as a define, for
   the GPU's real target, in the trusted runner, before anything of the candidate runs (the
   incumbent too, when it is a CUDA file); a compile error is a CRASH at stage "build" carrying
   nvcc's first error lines; the build's seconds go to `phase_seconds["build"]`, outside timing;
4. the job carries `prebuilt_entries`; the sandboxed candidate process calls `prepare_candidate`
   with them before the OS sandbox and before it imports kernel.py: the libraries load, and from
   then on nothing else may be built, so the file runs nothing but the scanned and built source;
5. every stage of the Triton path follows unchanged. The launch monitor
   (`autokernel.harness.guards.launches`) wraps `Extension.launch`: each launcher call counts as
   a launch (a file that launches nothing is rejected as for Triton), its stream is checked, and
   ghost replay skips it, so an output that is still right without the launch is a cached one.

What a launcher enqueues on the GPU is not counted kernel by kernel: a launcher that returns
without launching anything counts as a launch, and is then caught by correctness (nothing was
written: the output is the harness's poison) or by ghost replay (something else wrote it).
"""

from __future__ import annotations

from pathlib import Path

from autokernel.cuda.build import BuildResult, build_extension
from autokernel.kernelfile import KernelFileInfo, cuda_defines, cuda_source_text

def prebuild(info: KernelFileInfo, kernel_path: str | Path, cache_dir: str | Path,
             timeout_s: float, arch: str | None = None) -> BuildResult:
    """Compile the file's C++ with its tunables as defines (raises CudaBuildError)."""
    source_name = info.cuda_file or "CUDA_SOURCE"
    return build_extension(cuda_source_text(info, kernel_path), cuda_defines(info.tunables),
                           arch=arch, cache_dir=cache_dir, timeout_s=timeout_s,
                           source_name=source_name)


def prebuilt_entries(info: KernelFileInfo, kernel_path: str | Path,
                     library: str | Path) -> list[list[str]]:
    """[source key, library] pairs under which the file's `load_extension` call finds its build:
    the C++ text with the tunables' defines, and for a CUDA_FILE also the file's name, which is
    what `load_extension(CUDA_FILE, ...)` passes."""
    from autokernel.cuda.runtime import source_key

    defines = cuda_defines(info.tunables)
    entries = [[source_key(cuda_source_text(info, kernel_path), defines), str(library)]]
    if info.cuda_file is not None:
        entries.append([source_key(info.cuda_file, defines), str(library)])
    return entries


def prepare_candidate(entries: list[list[str]]) -> None:
    """In the candidate process, before the OS sandbox and the import of kernel.py: load the
    harness's builds, and forbid any other."""
    from autokernel.cuda import runtime

    for key, library in entries:
        runtime.use_prebuilt(key, library)
    runtime.forbid_builds()
