"""The CUDA candidate path, checked on the CPU with a gcc-built stand-in library: the runner's
prebuilt entries are what a kernel file's `load_extension` looks up; the candidate process loads
them before its sandbox and may build nothing else; the launch monitor counts, records and, in
ghost replay, skips `Extension.launch`. (The GPU run of the whole path is in test_cuda_backend.)"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from autokernel.cuda import runtime
from autokernel.cuda.harness import prebuilt_entries, prepare_candidate
from autokernel.cuda.runtime import Extension, load_extension, source_key
from autokernel.harness.guards import LaunchMonitor
from autokernel.kernelfile import cuda_defines, parse_kernel_source

CUDA_STARTERS = sorted((Path(__file__).resolve().parents[1] / "autokernel" / "kernels"
                        / "cuda").glob("*.py"))

# A launcher with the runtime's calling convention (int64 arguments, then the stream), counting
# its calls so a test can tell a launch that ran from one that was skipped.
STAND_IN_SOURCE = r"""
#include <stdint.h>
static int64_t total = 0, calls = 0;
int add_launch(int64_t value, void* stream) { (void)stream; total += value; calls += 1; return 0; }
int64_t launcher_calls(void) { return calls; }
const char* autokernel_error_string(int code) { (void)code; return "stand-in"; }
int autokernel_runtime_init(void) { return 0; }
"""


@pytest.fixture
def isolated_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The runtime's prebuilt table and build switch, fresh, restored afterwards."""
    monkeypatch.setattr(runtime, "_PREBUILT", {})
    monkeypatch.setattr(runtime, "_BUILDS_ALLOWED", [True])
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=0))
    yield


@pytest.fixture
def stand_in_library(tmp_path: Path) -> Path:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("needs a C compiler")
    source, library = tmp_path / "stand_in.c", tmp_path / "libstand_in.so"
    source.write_text(STAND_IN_SOURCE)
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", str(source), "-o", str(library)],
                   check=True, capture_output=True)
    return library


@pytest.fixture
def monitor() -> Iterator[LaunchMonitor]:
    """An installed CPU launch monitor; the class-wide hooks it sets are put back afterwards."""
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    import torch.utils.dlpack

    saved = [(cls, name, cls.__dict__[name]) for cls, name in (
        (JITFunction, "run"), (InterpretedFunction, "run"), (CompiledKernel, "__getitem__"),
        (torch.cuda.Stream, "__new__"), (torch.cuda.CUDAGraph, "replay"),
        (Extension, "launch"))]
    functions = [(module, name, getattr(module, name))
                 for module, name in ((torch.cuda, "set_stream"), (torch._C, "_to_dlpack"),
                                      (torch, "to_dlpack"), (torch.utils.dlpack, "to_dlpack"))]
    launches = LaunchMonitor("cpu")
    launches.install()
    try:
        yield launches
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)
        for module, name, value in functions:
            setattr(module, name, value)


def _extension_of(path: Path) -> Extension:
    spec = importlib.util.spec_from_file_location(f"cuda_starter_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # load_extension is lazy: nothing builds here
    found = [v for v in vars(module).values() if isinstance(v, Extension)]
    assert len(found) == 1, f"{path.name}: one load_extension(...) at module level"
    return found[0]


@pytest.mark.parametrize("path", CUDA_STARTERS, ids=lambda p: p.stem)
def test_the_runners_prebuilt_key_is_the_one_each_starter_looks_up(path: Path) -> None:
    info = parse_kernel_source(path.read_text(encoding="utf-8"))
    extension = _extension_of(path)
    keys = {key for key, _ in prebuilt_entries(info, path, "/nowhere/lib.so")}
    assert source_key(extension.source, extension.defines) in keys


def test_a_cuda_file_kernel_is_found_by_its_file_name_too(tmp_path: Path) -> None:
    (tmp_path / "kernel.cu").write_text('extern "C" int noop(void* s) { return 0; }\n')
    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        'from autokernel.cuda.runtime import load_extension\n\n'
        'KERNEL_TYPE = "reduce"\nBACKEND = "cuda"\nCUDA_FILE = "kernel.cu"\nBLOCK = 128\n'
        'TUNABLE_SPACE = {"BLOCK": [128, 256]}\n'
        'EXTENSION = load_extension(CUDA_FILE, {"BLOCK": BLOCK}, kernel_file=__file__)\n\n'
        'def kernel_fn(x):\n    return x\n')
    info = parse_kernel_source(kernel.read_text())
    extension = _extension_of(kernel)
    entries = prebuilt_entries(info, kernel, "/nowhere/lib.so")
    assert source_key(extension.source, extension.defines) in {key for key, _ in entries}
    assert len(entries) == 2  # the C++ text's key and the file name's


def test_the_candidate_loads_only_the_harness_builds(isolated_runtime: None,
                                                     stand_in_library: Path) -> None:
    defines = cuda_defines({"BLOCK": 128})
    prepare_candidate([[source_key(STAND_IN_SOURCE, defines), str(stand_in_library)]])
    built = load_extension(STAND_IN_SOURCE, {"BLOCK": 128})
    built.launch("add_launch", 5)
    assert built.library().launcher_calls() == 1
    for source, tunables in ((STAND_IN_SOURCE, {"BLOCK": 256}), ("// other", {"BLOCK": 128})):
        with pytest.raises(RuntimeError, match="not built by the harness"):
            load_extension(source, tunables).launch("add_launch", 1)


def test_the_monitor_counts_records_and_ghost_skips_cuda_launches(
        isolated_runtime: None, stand_in_library: Path, monitor: LaunchMonitor) -> None:
    runtime.use_prebuilt(source_key(STAND_IN_SOURCE, {}), stand_in_library)
    extension = load_extension(STAND_IN_SOURCE)
    calls = extension.library().launcher_calls

    extension.launch("add_launch", 1)  # disarmed (the harness's own calls): not counted
    assert (monitor.launches, calls()) == (0, 1)
    monitor.armed = True
    monitor.signatures = []
    extension.launch("add_launch", 2)
    assert (monitor.launches, calls()) == (1, 2)
    assert monitor.signatures == [("cuda:add_launch", "[]", (2,))]
    monitor.signatures = None
    monitor.ghost = True
    extension.launch("add_launch", 3)  # counted, and skipped: the library never sees it
    assert (monitor.launches, calls()) == (2, 2)
    monitor.ghost = monitor.armed = False
    assert monitor.tampered() == []
    Extension.launch = lambda self, name, *args: None  # type: ignore[method-assign]
    assert "Extension.launch" in monitor.tampered()
