"""Load a model file in KernelBench's convention, ready to run: `load_model_file`.

A model file defines `class Model(nn.Module)`, `get_inputs()` returning the forward's arguments and,
optionally, `get_init_inputs()` returning the constructor's. Profiling, the optimization loop and
verification all go through this one loader, so they see the same weights and the same inputs
(a fixed seed), the same dtype cast and the same error messages.

Every failure is a `ModelLoadError` with a one-line message that names the file; the loader never
lets a traceback through, because its errors are the user's input errors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from autokernel.ops.spec import dtype_name, parse_dtype
from autokernel.text import error_summary

DEFAULT_SEED = 0


class ModelLoadError(ValueError):
    """The model file cannot be loaded or run; the message is one line, fit for the user."""


@dataclass
class LoadedModel:
    model: nn.Module
    inputs: list[Any] | dict[str, Any]  # forward's positional arguments, or keyword arguments
    module_file: Path
    class_name: str
    device: str
    dtype: torch.dtype
    # Wall seconds of the check forward the loader ran (None: it ran none); a slow one is
    # warm-up enough for the profiler.
    forward_seconds: float | None = None

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)


@contextmanager
def _script_dir_on_path(directory: Path) -> Iterator[None]:
    """Let the file import its neighbours, as `python model.py` would."""
    entry = str(directory)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def import_model_file(path: str | Path) -> ModuleType:
    """Execute the file as a fresh module (a unique name, so two loads never share state)."""
    file = Path(path)
    if not file.is_file():
        raise ModelLoadError(f"model file not found: {file}")
    try:
        source = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read {file}: {error_summary(exc)}") from None
    try:
        compile(source, str(file), "exec")
    except SyntaxError as exc:
        raise ModelLoadError(
            f"syntax error in {file} line {exc.lineno}: {exc.msg}"
        ) from None
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:10]
    module_name = f"autokernel_model_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"cannot import {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: dataclasses and pickling look the module up by name.
    sys.modules[module_name] = module
    try:
        with _script_dir_on_path(file.resolve().parent):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise ModelLoadError(f"importing {file} failed: {error_summary(exc)}") from None
    return module


def _module_classes(module: ModuleType) -> list[str]:
    return sorted(
        name
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and not name.startswith("_")
    )


def _call_user_function(module: ModuleType, name: str, file: Path) -> Any:
    try:
        return getattr(module, name)()
    except (Exception, SystemExit) as exc:
        raise ModelLoadError(f"{name}() in {file} raised {error_summary(exc)}") from None


def _as_arguments(value: Any, what: str, file: Path) -> list[Any] | dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, torch.Tensor):  # a single input, returned bare
        return [value]
    raise ModelLoadError(
        f"{what} in {file} must return a list (or tuple, or dict) of arguments, "
        f"got {type(value).__name__}"
    )


def _prepare(value: Any, dtype: torch.dtype, device: str) -> Any:
    """Move tensors to the device; cast floating ones (token ids and masks keep their dtype)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, list):
        return [_prepare(v, dtype, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_prepare(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: _prepare(v, dtype, device) for k, v in value.items()}
    return value


def _cast(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Floating parameters and buffers to `dtype`; complex ones (a rotary `freqs_cis`) keep
    their dtype, where `model.to(dtype)` would cast them to real and drop the imaginary part."""
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.data = param.data.to(dtype)
        for module in model.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                if buffer.is_floating_point():
                    setattr(module, name, buffer.to(dtype))  # stays a buffer, as persistent
    return model


def call_forward(model: nn.Module, inputs: Sequence[Any] | Mapping[str, Any]) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(*inputs)


def run_forward(loaded: LoadedModel) -> Any:
    """One inference forward of the loaded model on its inputs (no autograd graph)."""
    with torch.no_grad():
        return call_forward(loaded.model, loaded.inputs)


def load_model_file(
    path: str | Path,
    class_name: str = "Model",
    dtype: str | torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = DEFAULT_SEED,
    check_forward: bool = True,
) -> LoadedModel:
    """Build `class_name` from the file with get_init_inputs(), cast, move, eval; check one forward.

    Parameters and floating-point buffers and inputs are cast to `dtype`; integer inputs (token
    ids) stay integers. Weights and inputs are drawn after `torch.manual_seed(seed)`, so two loads
    of one file on one device give the same model and inputs.
    """
    file = Path(path)
    try:
        torch_dtype = parse_dtype(dtype)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    module = import_model_file(file)

    cls = getattr(module, class_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        found = _module_classes(module)
        what = (f"no nn.Module class {class_name!r}" if cls is None
                else f"{class_name!r} is not an nn.Module class")
        hint = f" (found: {', '.join(found)}; pick one with --class-name)" if found else ""
        raise ModelLoadError(f"{what} in {file}{hint}")
    if not callable(getattr(module, "get_inputs", None)):
        raise ModelLoadError(f"{file} has no get_inputs() function (KernelBench convention)")

    init_args: list[Any] | dict[str, Any] = []
    torch.manual_seed(seed)
    # Factories in the constructor and in get_inputs() allocate on the device directly: a 7B-layer
    # model initialises in a fraction of the time there, and model code calling torch.zeros(...)
    # without a device still lands on the right one.
    with torch.device(device):
        if callable(getattr(module, "get_init_inputs", None)):
            init_args = _as_arguments(
                _call_user_function(module, "get_init_inputs", file), "get_init_inputs()", file
            )
        try:
            model = cls(**init_args) if isinstance(init_args, dict) else cls(*init_args)
        except (Exception, SystemExit) as exc:
            raise ModelLoadError(
                f"building {class_name} in {file} from get_init_inputs() failed: "
                f"{error_summary(exc)}"
            ) from None
        torch.manual_seed(seed + 1)
        raw_inputs = _as_arguments(
            _call_user_function(module, "get_inputs", file), "get_inputs()", file
        )

    try:
        model = _cast(model.to(device=device), torch_dtype).eval()
    except (Exception, SystemExit) as exc:
        raise ModelLoadError(
            f"moving {class_name} to {device} failed: {error_summary(exc)}") from None
    inputs = _prepare(raw_inputs, torch_dtype, device)
    loaded = LoadedModel(model, inputs, file, class_name, device, torch_dtype)

    if check_forward:
        try:
            start = time.perf_counter()
            run_forward(loaded)
            loaded.forward_seconds = time.perf_counter() - start
        except (Exception, SystemExit) as exc:
            raise ModelLoadError(
                f"the inputs from get_inputs() do not fit {class_name}.forward in {file}: "
                f"{error_summary(exc)}"
            ) from None
    return loaded
