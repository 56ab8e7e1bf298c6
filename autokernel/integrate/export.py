"""`autokernel export DIR --to PATH`: the run's kernels as ONE Python module, torch + triton only
(and nvcc for CUDA C++ kernels: `export_cuda.py`).

The written module holds:

- the code of `autokernel/interpreter_compat.py` and of `integrate/custom_ops.py`, `routing.py`,
  `call_recording.py`, `route_helpers.py`, `plans.py`, `attention_chain.py`,
  `function_routes.py` and `patch.py`, inlined (they import only torch, triton and numpy, by
  design), so registration, fake implementations, backwards, routing and probes are the same
  code `autokernel verify` checked;
- each finished kernel's source and the reference oracles (backward recomputation and probes use
  them) as strings, executed into their own modules on first use: kernel files are modules with
  clashing top-level names (kernel_fn, BLOCK_N...), and Triton reads a kernel's source through
  linecache, which `load_kernel_module` fills;
- each of the run's kernel types' integration section (the torch-only end of its op entry,
  `autokernel/ops/<type>.py`: schema, fake, backward and routes), as a string run with the
  inlined modules' names in scope;
- the manifest (what each kernel may be used for) as Python literals;
- `patch(model, device=None, ...)`, `optimize(model, device=None)`, `kernels(device=None,
  compile_transparent=None)`, `MANIFEST`, and `SELECTION` and `DELIVERY`, verify's in-context
  selection and delivery (patch routes the eager selection; optimize gives the delivery). Each kernel becomes a triton_op or a custom_op by the same rule, in the same
  inlined code (`triton_ops.py`), as in `autokernel verify` and `autokernel.load`.

Nothing of the run machinery (the workspace, git, the harness, autokernel itself) is needed.
"""

from __future__ import annotations

import ast
import pprint
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autokernel.integrate.export_cuda import (
    SHIM_REGISTRATION, CudaExportError, cuda_inlined, is_cuda_kernel, rewrite_cuda_sources,
)
from autokernel.integrate.integration import INTEGRATION_MARKER
from autokernel.pysource import parse_source

if TYPE_CHECKING:
    from autokernel.integrate.loader import FinishedRun

EXPORT_MARKER = "# autokernel export"
INLINED_MODULES = ("text.py", "interpreter_compat.py", "integrate/integration.py",
                   "integrate/triton_ops.py", "integrate/custom_ops.py",
                   "integrate/routing.py", "integrate/call_recording.py",
                   "integrate/route_helpers.py", "integrate/plans.py",
                   "integrate/attention_chain.py",
                   "integrate/logits_chain.py",
                   "integrate/residual_norm.py", "integrate/function_routes.py",
                   "integrate/patch.py", "integrate/compiled_attention.py",
                   "integrate/delivery.py")  # in dependency order


class ExportError(ValueError):
    """The destination cannot be written; the message is one line for the user."""


def inlinable_source(path: Path) -> str:
    """A module's code without its docstring, `from __future__` line and autokernel imports."""
    source = path.read_text(encoding="utf-8")
    tree = parse_source(source)
    drop: set[int] = set()
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        drop.update(range(body[0].lineno, body[0].end_lineno + 1))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
                node.module == "__future__" or (node.module or "").split(".")[0] == "autokernel"):
            drop.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.Import) and any(
                alias.name.split(".")[0] == "autokernel" for alias in node.names):
            drop.update(range(node.lineno, node.end_lineno + 1))
    lines = source.splitlines(keepends=True)
    kept = "".join(line for number, line in enumerate(lines, 1) if number not in drop)
    return kept.strip("\n") + "\n"


def integration_section(source: str) -> str:
    """An op file's integration part as a module of its own: the file's imports that do not
    name autokernel (the integrate modules' names are in scope where it runs), then everything
    after INTEGRATION_MARKER."""
    head, marker, tail = source.partition(INTEGRATION_MARKER)
    if not marker:
        raise ValueError("no integration section (INTEGRATION_MARKER) in this op file")
    imports = []
    lines = head.splitlines(keepends=True)
    for node in parse_source(head).body:
        if isinstance(node, ast.ImportFrom):
            root = (node.module or "").split(".")[0]
            if root in ("autokernel", "__future__"):
                continue
        elif isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "autokernel" for a in node.names):
                continue
        else:
            continue
        imports.append("".join(lines[node.lineno - 1:node.end_lineno]))
    return "".join(imports) + tail  # the section itself imports nothing: its names are above


def _string_literal(text: str) -> str:
    """A readable triple-quoted raw literal when the text allows one, else repr()."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


def _imports_autokernel(source: str) -> bool:
    for node in ast.walk(parse_source(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "autokernel":
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "autokernel"
                                                for a in node.names):
            return True
    return False


RUNTIME_FOOTER = '''
# ---------------------------------------------------------------------------------------------
# Loading this run's kernels, and `patch`

_LOADED: dict[tuple[str, bool | None], list[RoutedKernel]] = {}


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def kernels(device: str | None = None,
            compile_transparent: bool | None = None) -> list[RoutedKernel]:
    """This run's kernels, registered for `device` ("cuda", or "cpu" through the Triton
    interpreter), once per process: each a triton_op that torch.compile sees into where its host
    code traces, else a custom_op (`compile_transparent`: None decides so, True takes triton_ops,
    False custom ops). `patch(model).report.lines()` says which path each kernel took."""
    device = device or _default_device()
    key = (device, compile_transparent)
    if key not in _LOADED:
        prepare_device(device)  # TRITON_INTERPRET must be decided before the kernels are defined
        reference = load_kernel_module(f"{MODULE_PREFIX}_reference", REFERENCE_SOURCE,
                                       f"<{MODULE_PREFIX}:reference.py>")
        _LOADED[key] = build_kernels(MANIFEST, KERNEL_SOURCES, reference.REFERENCES,
                                     _integrations(), device, MODULE_PREFIX,
                                     compile_transparent=compile_transparent)
    return _LOADED[key]


def _integrations() -> dict[str, Integration]:
    """Each kernel type's integration section (its op entry's), run with this module's names."""
    found = {}
    for kernel_type, source in INTEGRATION_SOURCES.items():
        namespace = dict(globals())
        namespace["__name__"] = f"{MODULE_PREFIX}_{kernel_type}_integration"
        exec(compile(source, f"<{MODULE_PREFIX}:ops/{kernel_type}.py>", "exec"), namespace)
        found[kernel_type] = namespace["INTEGRATION"]
    return found


def patch(model: nn.Module, device: str | None = None, under_compile: str = "inductor",
          compile_transparent: bool | None = None, left_out: tuple[str, ...] = (),
          only: tuple[str, ...] | None = None) -> Patch:
    """Route `model`'s matching modules and calls to this run's kernels, in place: those
    `autokernel verify` kept for eager mode (SELECTION), or the tags in `only`.

    Returns a Patch: `.report.lines()` says what was routed (and what fell back to PyTorch and
    why), and whether each kernel is compile-transparent (triton_op) or opaque (custom_op, and
    why); `.unpatch()` gives every module its own forward back. Under torch.compile the calls
    are left to Inductor unless `under_compile="transparent"` (the triton_ops go into the
    graph) or `"kernels"` (every kernel does); `left_out` tags stay out of compiled graphs.
    """
    if only is None and SELECTION is not None:
        only = tuple(SELECTION.get("eager", ()))
    chosen = [k for k in kernels(device, compile_transparent) if only is None or k.tag in only]
    return patch_model(model, chosen, under_compile, left_out)


def optimize(model: nn.Module, device: str | None = None) -> Delivered:
    """The fastest model `autokernel verify` measured (DELIVERY): `model` with the kernels it
    kept, in the mode it chose (eager, a CUDA graph, torch.compile or reduce-overhead). Call the
    result like the model; `.delivery` says what it is, `.patch.report` what was routed."""
    if DELIVERY is None:
        raise RuntimeError("this export was made before `autokernel verify` chose a delivery; "
                           "run verify on the run and export again, or call patch(model)")
    choice = Delivery(DELIVERY["mode"], tuple(DELIVERY["kernels"]))
    return deliver(model, kernels(device), choice)
'''


def module_text(run: FinishedRun) -> str:
    """The exported module's source."""
    import hashlib

    from autokernel import __version__, reference
    from autokernel.integrate.loader import manifest_entry, read_sources

    targets = run.require_finished()
    selection = None if run.include_slower else run.selection()
    manifest = [manifest_entry(run, t) for t in targets]
    sources = read_sources(run, targets)
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha1("".join(sources.values()).encode()).hexdigest()[:10]
    module_prefix = f"autokernel_export_{digest}"
    inlined = [(name, inlinable_source(package / name)) for name in INLINED_MODULES]
    has_cuda = any(is_cuda_kernel(source) for source in sources.values())
    if has_cuda:  # the CUDA runtime and build, inlined; the kernels import them from a shim
        inlined += [(name, inlinable_source(path)) for name, path in cuda_inlined(package)]
        try:
            sources = rewrite_cuda_sources(sources, module_prefix)
        except CudaExportError as exc:
            raise ExportError(str(exc)) from None
    needs = "torch and triton only" if not has_cuda else (
        "torch and triton; its CUDA C++ kernels also need nvcc, and build on first use")
    summary = "\n".join(
        f"- {e['tag']}: {e['kernel_type']} at {'x'.join(map(str, e['shape']))} {e['dtype']}"
        + (f", {e['speedup_vs_eager']:.3g}x eager" if e["speedup_vs_eager"] else "")
        + (f", {e['speedup_vs_compile']:.3g}x torch.compile" if e["speedup_vs_compile"] else "")
        + f"; backward: {e['backward']}"
        for e in manifest)
    header = f'''{EXPORT_MARKER} of run {run.state.run_tag} (autokernel {__version__}).
"""Optimized Triton kernels from the autokernel run {run.state.run_tag}, as one module.

Model {run.info.get("model", "?")} ({run.class_name}), {run.dtype} on {run.plan.gpu or run.device}.
Exported {time.strftime("%Y-%m-%d %H:%M")}. Needs {needs}.

    import this_module
    p = this_module.patch(model)       # cuda by default; device="cpu" runs the Triton interpreter
    p.report.lines()                   # what was routed, what fell back to PyTorch and why
    p.unpatch()
    fast = this_module.optimize(model) # the delivery verify measured fastest; call fast(...)

Kernels:
{summary}
"""

from __future__ import annotations
'''
    parts = [header]
    for name, code in inlined:
        parts.append(f"\n# {'-' * 93}\n# Inlined from autokernel/{name}\n\n")
        parts.append(code)
    parts.append(f"\n# {'-' * 93}\n# This run\n\n")
    parts.append(f"MODULE_PREFIX = {module_prefix!r}\n\n")
    if has_cuda:
        parts.append(SHIM_REGISTRATION + "\n")
    parts.append(f"MANIFEST: list[dict[str, Any]] = {pprint.pformat(manifest, width=99)}\n\n")
    # verify's in-context selection (kernels per mode) and delivery, None before verify
    modes = {mode: list(tags) for mode, tags in selection.modes.items()} if selection else None
    delivery = ({"mode": selection.delivery["mode"], "kernels": selection.delivery["kernels"]}
                if selection and selection.delivery else None)
    parts.append(f"SELECTION: dict[str, list[str]] | None = {modes!r}\n")
    parts.append(f"DELIVERY: dict[str, Any] | None = {delivery!r}\n\n")
    parts.append("KERNEL_SOURCES: dict[str, str] = {}\n")
    for tag, source in sources.items():
        parts.append(f"KERNEL_SOURCES[{tag!r}] = {_string_literal(source)}\n\n")
    parts.append("INTEGRATION_SOURCES: dict[str, str] = {}\n")
    for kernel_type in sorted({e["kernel_type"] for e in manifest}):
        op_file = package / "ops" / f"{kernel_type}.py"
        section = integration_section(op_file.read_text(encoding="utf-8"))
        parts.append(f"INTEGRATION_SOURCES[{kernel_type!r}] = {_string_literal(section)}\n\n")
    reference_source = Path(reference.__file__).read_text(encoding="utf-8")
    parts.append(f"REFERENCE_SOURCE = {_string_literal(reference_source)}\n")
    parts.append(RUNTIME_FOOTER)
    text = "".join(parts)
    if _imports_autokernel(text):  # the whole point of the file; never ship one that does
        raise RuntimeError("internal error: the exported module still imports autokernel")
    compile(text, "<export>", "exec")
    return text


def export_run(run: FinishedRun, destination: str | Path) -> Path:
    """Write the module to `destination` (a .py path whose name is importable)."""
    path = Path(destination)
    if path.suffix != ".py" or not path.stem.isidentifier():
        raise ExportError(f"{destination}: the module path must end in .py and its name be a "
                          "Python identifier (e.g. llama_kernels.py), so it can be imported")
    if path.is_dir():
        raise ExportError(f"{destination} is a directory; give a file path ending in .py")
    if not path.parent.is_dir():
        raise ExportError(f"{path.parent} does not exist")
    if path.exists():
        head = path.read_text(encoding="utf-8", errors="replace")[: len(EXPORT_MARKER)]
        if head != EXPORT_MARKER:
            raise ExportError(f"{destination} exists and is not an autokernel export; remove it "
                              "or choose another path")
    text = module_text(run)
    path.write_text(text, encoding="utf-8")
    return path
