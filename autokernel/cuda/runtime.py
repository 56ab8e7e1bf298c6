"""What a `BACKEND = "cuda"` kernel file calls: its compiled C++ launchers, bound with ctypes.

The one import such a file may make from autokernel (the static scan allows exactly this module):

    from autokernel.cuda.runtime import load_extension
    EXT = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS})   # every tunable
    def kernel_fn(x):
        y = torch.empty(...)
        EXT.launch("reduce_launch", x, y, rows, cols, x.stride(0))
        return y

`load_extension` is lazy: nothing is built or loaded until the first launch, so a CUDA kernel file
imports on a machine without a GPU. A launcher is an `extern "C" int name(...)` whose parameters
follow the launch's arguments, converted as: tensor -> `const void*` / `void*` (its data_ptr(),
CUDA tensors only), bool and int -> `int64_t`, float -> `double`, and then one more parameter,
the current torch stream as a `cudaStream_t`: the launcher must launch on it. It returns a
`cudaError_t` (0 for success; `cudaGetLastError()` after the launch is the usual ending), which
`launch` raises as a RuntimeError with CUDA's message.

In the harness the library is built by the trusted runner before the candidate process imports
the file, and loaded there before the OS sandbox (`use_prebuilt`); the candidate may not build
(`forbid_builds`): a file that loads a source or defines other than its own CUDA_SOURCE and
tunables gets a clear error. Elsewhere
(exported kernels, tests) the first launch builds for the current GPU through the content cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from pathlib import Path
from typing import Any

from autokernel.cuda.defines import CU_FILE_NAME, cuda_define_value

_PREBUILT: dict[str, Path] = {}
_BUILDS_ALLOWED = [True]
_LIBRARIES: dict[Path, ctypes.CDLL] = {}


def source_key(source: str, defines: dict[str, Any]) -> str:
    """Identifies a (source, defines) pair without nvcc: how a prebuilt library is found."""
    payload = json.dumps({"source": source, "defines": sorted((str(k), str(v))
                                                              for k, v in defines.items())})
    return hashlib.sha256(payload.encode()).hexdigest()


def use_prebuilt(key: str, library: str | Path) -> None:
    """Register the library the trusted side built for the (source, defines) of `source_key`,
    load it and start its CUDA runtime now: in the harness this runs before the OS sandbox,
    which may refuse what a first load or a runtime's start does (mapping code, opening files)."""
    _PREBUILT[key] = Path(library)
    loaded = _load(Path(library))
    init = loaded.autokernel_runtime_init
    init.restype = ctypes.c_int
    code = init()
    if code != 0:
        raise RuntimeError(f"{Path(library).name}: starting its CUDA runtime failed "
                           f"(CUDA error {code})")


def forbid_builds() -> None:
    """From now on only prebuilt libraries load (the sandboxed candidate process)."""
    _BUILDS_ALLOWED[0] = False


def _define_texts(defines: dict[str, Any]) -> dict[str, str]:
    return {name: cuda_define_value(value, name) for name, value in defines.items()}


class Extension:
    """A CUDA source with its defines; built or found and loaded at the first launch."""

    def __init__(self, source: str, defines: dict[str, Any],
                 kernel_file: str | None = None) -> None:
        self.source = source  # the C++ text, or a CUDA_FILE name beside `kernel_file`
        self.kernel_file = kernel_file
        self.defines = _define_texts(defines)
        self._library: ctypes.CDLL | None = None

    def library(self) -> ctypes.CDLL:
        if self._library is None:
            self._library = _load(self._library_path())
        return self._library

    def _library_path(self) -> Path:
        prebuilt = _PREBUILT.get(source_key(self.source, self.defines))
        if prebuilt is not None:
            return prebuilt
        if not _BUILDS_ALLOWED[0]:
            raise RuntimeError("this CUDA source and defines were not built by the harness: "
                               "load_extension must get the file's own CUDA_SOURCE and every "
                               "tunable of TUNABLE_SPACE as defines")
        from autokernel.cuda.build import build_extension

        text = self.source
        if CU_FILE_NAME.match(self.source):
            if self.kernel_file is None:
                raise RuntimeError(f"load_extension({self.source!r}) needs kernel_file=__file__")
            text = (Path(self.kernel_file).parent / self.source).read_text(encoding="utf-8")
        return build_extension(text, self.defines).library

    def launch(self, name: str, *args: Any) -> None:
        """Call the `extern "C"` launcher `name` with `args` and the current stream. (In the
        harness the launch monitor wraps this method: it counts each call as a launch and skips
        it in ghost replay.)"""
        import torch

        converted: list[Any] = []
        for arg in args:
            if isinstance(arg, torch.Tensor):
                if not arg.is_cuda:  # NotImplementedError: a patched model falls back to torch
                    raise NotImplementedError(f"{name}: a CUDA C++ kernel needs CUDA tensors "
                                              "(needs a GPU)")
                converted.append(ctypes.c_void_p(arg.data_ptr()))
            elif isinstance(arg, (bool, int)):
                converted.append(ctypes.c_int64(int(arg)))
            elif isinstance(arg, float):
                converted.append(ctypes.c_double(arg))
            else:
                raise TypeError(f"{name}: cannot pass {type(arg).__name__} to a CUDA launcher")
        converted.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        function = getattr(self.library(), name)
        function.restype = ctypes.c_int
        code = function(*converted)
        if code != 0:
            raise RuntimeError(f"{name} failed: CUDA error {code}: {self.error_string(code)}")

    def error_string(self, code: int) -> str:
        describe = self.library().autokernel_error_string
        describe.restype = ctypes.c_char_p
        return (describe(ctypes.c_int(code)) or b"unknown error").decode(errors="replace")


def _load(path: Path) -> ctypes.CDLL:
    if path not in _LIBRARIES:
        _LIBRARIES[path] = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    return _LIBRARIES[path]


def load_extension(source: str, defines: dict[str, Any] | None = None, *,
                   kernel_file: str | None = None) -> Extension:
    """The file's CUDA source (CUDA_SOURCE, or CUDA_FILE with kernel_file=__file__) with its
    tunables as `-D` defines (built lazily)."""
    return Extension(source, dict(defines or {}), kernel_file)
