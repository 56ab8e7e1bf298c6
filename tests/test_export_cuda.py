"""`autokernel export` of a run with a CUDA C++ kernel: the runtime and build are inlined, the
kernel imports them from the export's own shim (never autokernel), and on a machine without a
GPU a patched model falls back to PyTorch per call, saying why. (Building and running the
kernel on a GPU: tests/test_cuda_backend.py.)"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch
from fabricated_run import fabricate_run

from autokernel.integrate.export import ExportError, export_run
from autokernel.integrate.loader import open_run
from autokernel.kernels import starter_path
from autokernel.profiling.model_loader import load_model_file

MODEL = Path(__file__).parent / "fixtures" / "models" / "rmsnorm_builtin.py"


def _cuda_run(tmp_path: Path) -> Path:
    run, plan = fabricate_run(MODEL, tmp_path / "run")
    (target,) = plan.targets
    kernel = run / "kernels" / f"{target.rank:02d}_{target.kernel_type}.py"
    shutil.copy2(starter_path(target.kernel_type, backend="cuda"), kernel)
    return run


def _import(path: Path) -> object:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def test_a_cuda_kernel_exports_with_its_runtime_inlined_and_falls_back_on_the_cpu(
        tmp_path: Path) -> None:
    written = export_run(open_run(_cuda_run(tmp_path)), tmp_path / "cuda_kernels.py")
    text = written.read_text()
    assert "from autokernel.cuda.runtime import load_extension" not in text
    assert "Inlined from autokernel/cuda/runtime.py" in text and "also need nvcc" in text
    exported = _import(written)
    prefix = exported.MODULE_PREFIX  # type: ignore[attr-defined]
    assert sys.modules[prefix + "_cuda_runtime"].load_extension \
        is exported.load_extension  # type: ignore[attr-defined]

    loaded = load_model_file(MODEL, device="cpu")
    expected = loaded.model(*loaded.inputs)
    patch = exported.patch(loaded.model, device="cpu")  # type: ignore[attr-defined]
    try:
        routed = loaded.model(*loaded.inputs)
    finally:
        patch.unpatch()
    torch.testing.assert_close(routed, expected)
    (tag,) = [entry["tag"] for entry in exported.MANIFEST]  # type: ignore[attr-defined]
    kernel_module = sys.modules[f"{prefix}_{tag}"]
    assert type(kernel_module.EXTENSION) is exported.Extension  # type: ignore[attr-defined]
    report = "\n".join(patch.report.lines())
    assert "needs CUDA tensors" in report  # each call fell back to PyTorch, and says why


def test_a_cuda_file_kernel_is_refused_with_a_one_line_reason(tmp_path: Path) -> None:
    run = _cuda_run(tmp_path)
    (kernel,) = (run / "kernels").glob("*.py")
    source = kernel.read_text()
    start = source.index('CUDA_SOURCE = r"""')
    end = source.index('"""', start + len('CUDA_SOURCE = r"""')) + 3
    (kernel.parent / "rmsnorm.cu").write_text(source[start + len('CUDA_SOURCE = r"""'):end - 3])
    kernel.write_text(source[:start] + 'CUDA_FILE = "rmsnorm.cu"' + source[end:])
    with pytest.raises(ExportError, match="inline it as CUDA_SOURCE"):
        export_run(open_run(run), tmp_path / "k.py")
