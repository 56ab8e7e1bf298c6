"""`autokernel export`: one module that patches a model with autokernel made unimportable."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEVICE
from fabricated_run import fabricate_run
from finished_run import (  # noqa: F401 - fixtures
    EXPECTED_CALLS,
    REPO,
    autokernel,
    made_run,
    one_line_error,
    run_dir,
    unfinish,
)

# Runs under `python -I` (no PYTHONPATH, no script directory, no user site) with a meta-path
# finder that refuses autokernel, which the test venv has installed.
USE_THE_EXPORT = r'''
import importlib, importlib.abc, json, sys

class NoAutokernel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "autokernel" or name.startswith("autokernel."):
            raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, NoAutokernel())
try:
    import autokernel  # noqa: F401
    blocked = False
except ImportError:
    blocked = True

import torch
sys.path.insert(0, MODELS)
import tiny_llama  # the same model file the run optimized (it imports llama.py beside it)

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)  # the seeds of autokernel's model loader
model = tiny_llama.Model(*tiny_llama.get_init_inputs()).to(device).eval()
torch.manual_seed(1)
tokens = tiny_llama.get_inputs()[0].to(device)
with torch.no_grad():
    expected = model(tokens)
model.zero_grad()
model(tokens).square().mean().backward()
expected_grads = [p.grad.clone() for p in model.parameters()]

sys.path.insert(0, EXPORT_DIR)
exported = importlib.import_module(EXPORT_NAME)
patch = exported.patch(model)
with torch.no_grad():
    routed = model(tokens)
model.zero_grad()
model(tokens).square().mean().backward()
grad_error = max(((p.grad - g).abs().max() / g.abs().max().clamp_min(1e-12)).item()
                 for p, g in zip(model.parameters(), expected_grads))
print(json.dumps({
    "blocked": blocked,
    "autokernel_modules": sorted(m for m in sys.modules if m.split(".")[0] == "autokernel"),
    "max_abs_error": (routed - expected).abs().max().item(),
    "calls": {stats.kernel_type: stats.calls for stats in patch.report.kernels.values()},
    "grad_error": grad_error,
    "tags": [entry["tag"] for entry in exported.MANIFEST],
    "compile_paths": [stats.compile_path for stats in patch.report.kernels.values()],
    "forced_paths": [k.op.compile_path for k in exported.kernels(device, True)],
}))
'''


def imports_of(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_export_writes_one_module_that_patches_a_model_without_autokernel(
        run_dir: Path, tmp_path: Path) -> None:
    module = tmp_path / "tiny_llama_kernels.py"
    done = autokernel("export", str(run_dir), "--to", str(module))
    assert done.returncode == 0, done.stderr[-2000:]
    source = module.read_text()
    assert "autokernel" not in imports_of(source)
    assert imports_of(source) <= {"__future__", "collections", "contextlib", "dataclasses",
                                  "functools", "hashlib",
                                  "inspect", "linecache", "math", "os", "sys", "types", "typing",
                                  "weakref",
                                  "torch",
                                  # the interpreter fix, imported only on the CPU path
                                  "numpy", "triton"}
    state = json.loads((run_dir / "state.json").read_text())
    for target in state["targets"]:  # the kernels themselves, verbatim
        assert (run_dir / target["kernel_file"]).read_text() in source

    script = tmp_path / "use_export.py"
    script.write_text(f"MODELS = {str(REPO / 'examples' / 'models')!r}\n"
                      f"EXPORT_DIR = {str(module.parent)!r}\n"
                      f"EXPORT_NAME = {module.stem!r}\n" + USE_THE_EXPORT)
    used = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert used.returncode == 0, used.stderr[-3000:]
    outcome = json.loads(used.stdout.strip().splitlines()[-1])
    assert outcome["blocked"] and outcome["autokernel_modules"] == []
    # Two forwards (one for the output, one for the gradients): every module routed each time.
    assert outcome["calls"] == {kernel_type: 2 * n for kernel_type, n in EXPECTED_CALLS.items()}
    assert outcome["max_abs_error"] < 1e-5
    assert outcome["grad_error"] < 1e-4  # the backwards (and the inlined reference) work too
    assert sorted(outcome["tags"]) == sorted(t["tag"] for t in state["targets"])
    # The export registers each kernel by the same rule (triton_ops.py, inlined): on the CPU
    # interpreter the automatic choice is the custom_op, and says why; forced, triton_ops.
    if DEVICE == "cpu":
        assert all(path.startswith("opaque to torch.compile (custom_op: Triton interpreter")
                   for path in outcome["compile_paths"]), outcome["compile_paths"]
    assert set(outcome["forced_paths"]) == {"triton_op"}


def test_export_overwrites_its_own_module_but_nothing_else(run_dir: Path,
                                                           tmp_path: Path) -> None:
    module = tmp_path / "kernels_v1.py"
    assert autokernel("export", str(run_dir), "--to", str(module)).returncode == 0
    assert autokernel("export", str(run_dir), "--to", str(module)).returncode == 0
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    assert "not an autokernel export" in one_line_error(
        autokernel("export", str(run_dir), "--to", str(mine)))
    assert mine.read_text() == "x = 1\n"


def test_export_refuses_a_module_name_python_cannot_import(run_dir: Path,
                                                           tmp_path: Path) -> None:
    line = one_line_error(autokernel("export", str(run_dir), "--to",
                                     str(tmp_path / "my-kernels.py")))
    assert "Python identifier" in line


def test_export_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    line = one_line_error(autokernel("export", str(tmp_path), "--to",
                                     str(tmp_path / "k.py")))
    assert "is not an autokernel run" in line


def test_export_refuses_a_run_with_no_finished_target(run_dir: Path, tmp_path: Path) -> None:
    unfinish(run_dir)
    line = one_line_error(autokernel("export", str(run_dir), "--to", str(tmp_path / "k.py")))
    assert "no finished target" in line


# A fixture model's run, exported and used with autokernel unimportable: the routes that are
# not modules (batched products, the explicit-attention chain, a rope function) ship too.
USE_A_FIXTURE_EXPORT = r'''
import importlib, importlib.abc, importlib.util, json, sys

class NoAutokernel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "autokernel" or name.startswith("autokernel."):
            raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, NoAutokernel())
import torch

spec = importlib.util.spec_from_file_location("fixture_model", MODEL)
fixture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixture)
torch.manual_seed(0)
model = fixture.Model().eval()
torch.manual_seed(1)
inputs = fixture.get_inputs()
with torch.no_grad():
    expected = model(*inputs)
sys.path.insert(0, EXPORT_DIR)
exported = importlib.import_module(EXPORT_NAME)
patch = exported.patch(model, device="cpu")
with torch.no_grad():
    routed = model(*inputs)
print(json.dumps({
    "autokernel_modules": sorted(m for m in sys.modules if m.split(".")[0] == "autokernel"),
    "max_abs_error": (routed - expected).abs().max().item(),
    "calls": {stats.tag: stats.calls for stats in patch.report.kernels.values()},
}))
'''


@pytest.mark.parametrize("name, calls", [
    ("rope_function", {"flash_attention": 2, "matmul (linear)": 4, "rotary_embedding": 4}),
    ("explicit_attention", {"flash_attention": 1}),
    # ln_2 takes the residual add's result: one add_layernorm call; ln_1 a plain layernorm. The
    # masked softmax(q·kᵀ)·v is one attention (the `== 0` mask proved causal), the tanh GELU
    # module its whole forward.
    ("minigpt_lambda", {"matmul (linear)": 4, "layernorm": 1, "add_layernorm": 1,
                        "flash_attention": 1, "gelu": 1}),
])
def test_an_export_routes_functions_chains_and_batched_products(name: str, calls: dict[str, int],
                                                                tmp_path: Path) -> None:
    model_file = REPO / "tests" / "fixtures" / "models" / f"{name}.py"
    run, plan = fabricate_run(model_file, tmp_path / "run")
    labels = {f"{t.rank:02d}_{t.kernel_type}": t.label for t in plan.targets}  # tag -> label
    assert sorted(labels.values()) == sorted(calls)
    module = tmp_path / f"{name}_kernels.py"
    done = autokernel("export", str(run), "--to", str(module))
    assert done.returncode == 0, done.stderr[-2000:]
    script = tmp_path / "use_export.py"
    script.write_text(f"MODEL = {str(model_file)!r}\nEXPORT_DIR = {str(module.parent)!r}\n"
                      f"EXPORT_NAME = {module.stem!r}\n" + USE_A_FIXTURE_EXPORT)
    used = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert used.returncode == 0, used.stderr[-3000:]
    outcome = json.loads(used.stdout.strip().splitlines()[-1])
    assert outcome["autokernel_modules"] == []
    assert {labels[tag]: n for tag, n in outcome["calls"].items()} == calls
    assert outcome["max_abs_error"] < 1e-5


def test_inlined_modules_define_each_top_level_name_once() -> None:
    """The export puts the inlined modules in one namespace: a helper defined in two of them
    would silently replace the first (custom_ops' and routing's `positional_arity` did)."""
    from autokernel.integrate.export import INLINED_MODULES, RUNTIME_FOOTER
    from autokernel.integrate.export_cuda import CUDA_INLINED_MODULES, SHIM_REGISTRATION

    package = Path(__file__).resolve().parents[1] / "autokernel"
    homes: dict[str, list[str]] = {}
    texts = [(name, (package / name).read_text(encoding="utf-8"))
             for name in INLINED_MODULES + CUDA_INLINED_MODULES]
    for name, text in [*texts, ("footer", RUNTIME_FOOTER), ("cuda shim", SHIM_REGISTRATION)]:
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined = [node.name]
            elif isinstance(node, ast.Assign):
                defined = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined = [node.target.id]
            else:
                defined = []
            for defined_name in defined:
                homes.setdefault(defined_name, []).append(name)
    assert {n: m for n, m in homes.items() if len(m) > 1} == {}
