"""Ahead-of-time Hopper compile check, on a machine without a GPU.

The Triton interpreter runs a kernel's Python body with numpy: it never lowers the kernel to
PTX, so a kernel that passes every CPU test can still fail to compile for an H100 (an op the
interpreter accepts but the compiler rejects, such as a non-power-of-two `tl.arange`) or fail to
launch (more shared memory than a block may have, more registers than an SM holds, a grid axis
over 65535). This module catches those on the CPU, in two phases:

1. Record: run the file's `kernel_fn` on small CPU tensors under the interpreter while
   `record_launches` notes every Triton launch (the launched function, grid, positional and
   keyword arguments, num_warps/num_stages included). Each launch is specialised exactly as the
   JIT would at launch time on the GPU, by Triton's own binder: pointer dtypes ("*bf16"), 16-byte
   alignment, integer width and divisibility by 16, constexpr values, compile options. Identical
   specialisations are checked once.
2. Compile: import the same file as ordinary `JITFunction`s and `triton.compile` each recorded
   specialisation for `GPUTarget("cuda", 90, 32)` (Triton ships ptxas: the result is a real
   sm_90a cubin), then read its resource usage with the bundled cuobjdump and check it against
   Hopper's limits.

The phases need different processes: `import triton` decorates Triton's own library (`tl.sum`,
`tl.max`, ...) once, as interpreted or as compilable functions, depending on TRITON_INTERPRET.
Whichever phase does not suit the current process runs in a child `python -m autokernel.aot`.

Constexprs, and so the compiled variant, can depend on the shape (block sizes clamped to the row
length, say): check the shapes you care about. `execute=False` records launches without
interpreting them, which makes GPU-sized shapes affordable (outputs stay uninitialised, so a
launcher that reads a result on the host to plan its next launch is not supported that way).

Command line (used by `autokernel doctor`):
    python -m autokernel.aot check path/to/kernel.py [--shape 8x1000] [--dtype bf16]
        [--no-execute] [--json]
A file of another backend is checked by that backend's own compiler (`KernelBackend.aot_check`:
nvcc for a `BACKEND = "cuda"` file, `autokernel.cuda.aot`).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from autokernel.backends.interface import AotResult
from autokernel.gpu.occupancy import SM_LIMITS, WARP_SIZE

HOPPER_ARCH = 90
# Hopper (sm_90: H100, H200) launch limits, from the one table of SM limits.
HOPPER_MAX_SHARED_BYTES = SM_LIMITS[(9, 0)].max_shared_per_block  # 227 KiB, opt-in maximum
HOPPER_REGISTERS_PER_SM = SM_LIMITS[(9, 0)].registers
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
SUBPROCESS_TIMEOUT_S = 900
DETAIL_CHARS = 6000


@dataclass
class KernelLaunch:
    """One `kernel[grid](*args, **kwargs)` call seen by the interpreter."""

    fn: Callable[..., Any]
    """The plain Python function under `@triton.jit`."""
    grid: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        return self.fn.__name__


@dataclass
class CompileRequest:
    """A launch, specialised as the JIT would: everything `triton.compile` needs but the code."""

    kernel: str  # module-level name of the @triton.jit function
    context: str
    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], Any]
    options: dict[str, Any]
    grid: list[int]
    frontend_only: bool = False
    """Lower to Triton IR only (the code generator runs the body's Python; no backend passes,
    ptxas or resource limits): catches a body the compiler cannot lower at a fraction of the
    cost."""


def gpu_target(arch: int = HOPPER_ARCH) -> Any:
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", arch, WARP_SIZE)


def triton_interprets() -> bool:
    """Whether this process imported Triton for the interpreter (decided once, at import)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.sum, InterpretedFunction)


@contextmanager
def record_launches(execute: bool = True) -> Iterator[list[KernelLaunch]]:
    """Record every interpreted Triton launch in the block (and run it, unless `execute` is
    False). Kernels must have been decorated under the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    launches: list[KernelLaunch] = []
    original_run = InterpretedFunction.run

    def recording_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            launches.append(KernelLaunch(self.fn, grid, tuple(args), dict(kwargs)))
        if execute:
            return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        return None

    InterpretedFunction.run = recording_run  # type: ignore[method-assign]
    try:
        yield launches
    finally:
        InterpretedFunction.run = original_run  # type: ignore[method-assign]


_module_counter = itertools.count()


def load_module(path: str | Path) -> ModuleType:
    """Import a file as a fresh module (never cached: the file may have been edited since)."""
    path = Path(path).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_autokernel_aot_{stem}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect.getsource, which Triton uses, looks modules up here
    spec.loader.exec_module(module)
    return module


def _first_lines(text: str, limit: int = 8) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:limit]) + (" | ..." if len(lines) > limit else "")


def _detail(exc: BaseException) -> str:
    from autokernel.text import bounded_text

    return bounded_text(f"{type(exc).__name__}: {exc}".strip(), DETAIL_CHARS)


def _grid_dims(grid: Any, bound_args: dict[str, Any]) -> list[int]:
    dims = grid(bound_args) if callable(grid) else grid
    dims = tuple(int(d) for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
    return list(dims + (1,) * (3 - len(dims)))


def specialize(launch: KernelLaunch, target: Any, context: str = "") -> CompileRequest:
    """What the JIT would compile for this launch on `target`, via Triton's own binder."""
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    backend = make_backend(target)
    jit = JITFunction(launch.fn)  # only its parameter list is used here
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    kwargs = dict(launch.kwargs)
    bound_args, specialization, raw_options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(
        backend, kwargs, bound_args, specialization, raw_options)
    return CompileRequest(kernel=launch.name, context=context, signature=dict(signature),
                          constexprs=dict(constexprs), attrs=dict(attrs),
                          options=dict(options.__dict__),
                          grid=_grid_dims(launch.grid, bound_args))


def record_call(fn: Callable[..., Any], args: Sequence[Any], *, context: str = "",
                execute: bool = True, target: Any = None
                ) -> tuple[list[CompileRequest], list[AotResult]]:
    """Run `fn(*args)` under the interpreter and specialise what it launched.

    Returns the compile requests and, for a call that fails or launches nothing, a failed result.
    """
    name = getattr(fn, "__name__", "?")
    try:
        with record_launches(execute) as launches:
            fn(*args)
    except Exception as exc:
        return [], [AotResult(name, ok=False, context=context,
                              error=f"under the interpreter: {type(exc).__name__}: "
                                    f"{_first_lines(str(exc))}", detail=_detail(exc))]
    if not launches:
        return [], [AotResult(name, ok=False, context=context, error="launched no Triton kernel")]
    requests, failures = [], []
    for launch in launches:
        try:
            requests.append(specialize(launch, target or gpu_target(), context))
        except Exception as exc:  # e.g. an unknown keyword argument: the GPU launch would fail
            failures.append(AotResult(launch.name, ok=False, context=context,
                                      error=f"{type(exc).__name__}: {_first_lines(str(exc))}",
                                      detail=_detail(exc)))
    return requests, failures


@dataclass(frozen=True)
class OpInputs:
    """The inputs of a registered op, built in the process that uses them (so GPU-sized ones are
    never pickled between the phases)."""

    kernel_type: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def build(self) -> tuple[Any, ...]:
        from autokernel.ops import get_spec

        spec = get_spec(self.kernel_type)
        return spec.make_inputs(self.shape, self.dtype, "cpu", torch.Generator().manual_seed(0))

    @property
    def context(self) -> str:
        from autokernel.ops.spec import dtype_name

        return f"{dtype_name(self.dtype)} {'x'.join(map(str, self.shape))}"


Call = tuple[str, "tuple[Any, ...] | OpInputs"]
"""(context, arguments) of one call to check."""


def _record_file_calls(path: Path, function_name: str, calls: list[Call], execute: bool,
                       arch: int) -> tuple[list[CompileRequest], list[AotResult]]:
    fn = getattr(load_module(path), function_name)
    requests: list[CompileRequest] = []
    failures: list[AotResult] = []
    for context, args in calls:
        if isinstance(args, OpInputs):
            args = args.build()
        found, failed = record_call(fn, args, context=context, execute=execute,
                                    target=gpu_target(arch))
        requests += found
        failures += failed
    return requests, failures


def _resource_usage(cubin: bytes, kernel_name: str) -> dict[str, int]:
    """REG/SHARED/LOCAL of `kernel_name` from the bundled cuobjdump; {} if unavailable."""
    import triton

    try:
        tool = triton.knobs.nvidia.cuobjdump
        exe = tool.path if tool is not None else None
    except Exception:  # the knob resolves lazily and may find no binary
        exe = None
    if not exe:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        done = subprocess.run([exe, "--dump-resource-usage", handle.name],
                              capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return {}
    usage: dict[str, int] = {}
    in_kernel = False
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("Function "):
            in_kernel = line.removeprefix("Function ").rstrip(":") == kernel_name
        elif in_kernel:
            usage.update({k: int(v) for k, v in re.findall(r"\b(REG|SHARED|LOCAL):(\d+)", line)})
    return usage


def _limit_violations(result: AotResult) -> list[str]:
    problems = []
    threads = (result.num_warps or 0) * WARP_SIZE
    if threads > MAX_THREADS_PER_BLOCK:
        problems.append(f"{threads} threads per block > {MAX_THREADS_PER_BLOCK}")
    if result.shared_bytes is not None and result.shared_bytes > HOPPER_MAX_SHARED_BYTES:
        problems.append(f"needs {result.shared_bytes} bytes of shared memory per block; "
                        f"Hopper allows {HOPPER_MAX_SHARED_BYTES} (lower num_stages or blocks)")
    if result.n_regs is not None and result.n_regs * threads > HOPPER_REGISTERS_PER_SM:
        problems.append(f"{result.n_regs} registers x {threads} threads > "
                        f"{HOPPER_REGISTERS_PER_SM} per SM: the launch would fail")
    for axis, (dim, limit) in enumerate(zip(result.grid or [], MAX_GRID)):
        if dim > limit:
            problems.append(f"grid axis {axis} is {dim} > {limit}")
    return problems


def _dedupe(requests: Sequence[CompileRequest]) -> list[CompileRequest]:
    seen: dict[str, CompileRequest] = {}
    for r in requests:
        key = repr((r.kernel, sorted(r.signature.items()), sorted(r.constexprs.items()),
                    sorted(r.attrs.items()), sorted(r.options.items()), r.grid,
                    r.frontend_only))
        seen.setdefault(key, r)
    return list(seen.values())


def _compile_requests(path: Path, requests: list[CompileRequest], arch: int) -> list[AotResult]:
    import triton
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    target = gpu_target(arch)
    module = load_module(path)
    results = []
    for request in _dedupe(requests):
        result = AotResult(request.kernel, ok=False, context=request.context,
                           signature=request.signature, grid=request.grid,
                           num_warps=request.options.get("num_warps"),
                           num_stages=request.options.get("num_stages"))
        try:
            jit = getattr(module, request.kernel, None)
            if not isinstance(jit, JITFunction):
                raise LookupError(f"no module-level @triton.jit function {request.kernel!r}")
            result.constexprs = {jit.arg_names[p[0]]: v for p, v in request.constexprs.items()
                                 if len(p) == 1}
            source = ASTSource(jit, request.signature, request.constexprs, request.attrs)
            if request.frontend_only:
                _lower_to_ttir(source, target, request.options)
                result.ok = True
                results.append(result)
                continue
            compiled = triton.compile(source, target=target, options=request.options)
            result.shared_bytes = int(compiled.metadata.shared)
            usage = _resource_usage(compiled.asm["cubin"], compiled.metadata.name)
            result.n_regs, result.local_bytes = usage.get("REG"), usage.get("LOCAL")
            result.error = "; ".join(_limit_violations(result))
            result.ok = not result.error
            if result.local_bytes:
                result.warnings.append(
                    f"{result.local_bytes} bytes of local memory per thread (register spills)")
        except Exception as exc:  # a compile error is the finding, not a crash of the check
            result.error = f"{type(exc).__name__}: {_first_lines(str(exc))}"
            result.detail = _detail(exc)
        results.append(result)
    return results


def _lower_to_ttir(source: Any, target: Any, options: dict[str, Any]) -> None:
    """`triton.compile`'s first step alone: the code generator walks the body into Triton IR."""
    from triton._C.libtriton import ir
    from triton.compiler import make_backend

    backend = make_backend(target)
    parsed = backend.parse_options(dict(options or {}, **source.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source.make_ir(target, parsed, backend.get_codegen_implementation(parsed),
                   backend.get_module_map(), context)


# The two phases, each run in a process whose Triton suits it.
_PHASES: dict[str, tuple[bool, Callable[..., Any]]] = {
    "record": (True, _record_file_calls),
    "compile": (False, _compile_requests),
}


class PhaseCrash(RuntimeError):
    """The child process running a phase died (a compiler segfault, say) or timed out."""


def _run_phase(phase: str, *payload: Any) -> Any:
    interpret, function = _PHASES[phase]
    if triton_interprets() == interpret:
        return function(*payload)
    with tempfile.TemporaryDirectory(prefix="autokernel-aot-") as tmp:
        inbox, outbox = Path(tmp) / "in.pkl", Path(tmp) / "out.pkl"
        inbox.write_bytes(pickle.dumps(payload))
        env = dict(os.environ, TRITON_INTERPRET="1" if interpret else "0")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "autokernel.aot", "_phase", phase, str(inbox),
                 str(outbox)],
                env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise PhaseCrash(f"{phase} phase timed out after {SUBPROCESS_TIMEOUT_S} s") from exc
        if done.returncode != 0 or not outbox.exists():
            raise PhaseCrash(f"{phase} phase died (exit {done.returncode}): "
                             f"{_first_lines(done.stderr[-4000:])}")
        return pickle.loads(outbox.read_bytes())


def compile_requests(path: str | Path, requests: Sequence[CompileRequest],
                     arch: int = HOPPER_ARCH) -> list[AotResult]:
    """Compile recorded launches of the kernels in `path` (in a child process if this one
    interprets). A crashed child is reported as one failed result."""
    try:
        return _run_phase("compile", Path(path).resolve(), list(requests), arch)
    except PhaseCrash as exc:
        kernels = ", ".join(sorted({r.kernel for r in requests}))
        return [AotResult(kernels, ok=False, error=str(exc))]


def check_file(path: str | Path, function_name: str, calls: Sequence[Call], *,
               execute: bool = True, arch: int = HOPPER_ARCH,
               recorded_calls: Sequence[Call] = ()) -> list[AotResult]:
    """Compile-check every Triton kernel that `function_name` in file `path` launches when called
    with each of `calls` (interpreted when `execute`) and each of `recorded_calls` (recorded
    only: GPU-sized shapes). All compile in one compile phase: its process costs more to start
    than a compile. Never empty: a call that raises or launches nothing is a failed result."""
    path = Path(path).resolve()
    requests: list[CompileRequest] = []
    failures: list[AotResult] = []
    for batch, interpreted in ((list(calls), execute), (list(recorded_calls), False)):
        if not batch:
            continue
        try:
            found, failed = _run_phase("record", path, function_name, batch, interpreted, arch)
        except PhaseCrash as exc:
            return [AotResult(function_name, ok=False, error=str(exc))]
        requests += found
        failures += failed
    return failures + (compile_requests(path, requests, arch) if requests else [])


def check_kernel_file(
    path: str | Path,
    *,
    shapes: Sequence[Sequence[int]] | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    execute: bool = True,
    arch: int = HOPPER_ARCH,
    recorded: Sequence[tuple[Sequence[int], torch.dtype]] = (),
) -> list[AotResult]:
    """Compile-check a kernel.py's `kernel_fn` per shape and dtype (default: the op's smoke
    shape in each of its dtypes), and per (shape, dtype) of `recorded`, launches recorded
    without interpreting them (the block sizes a GPU run at that shape would use)."""
    from autokernel.kernelfile import ENTRY_POINT, read_kernel_file
    from autokernel.ops import get_spec

    info = read_kernel_file(path)
    if info.backend != "triton":  # its own compiler (nvcc for cuda): shapes and dtypes are moot
        from autokernel.backends import backend

        return backend(info.backend).aot_check(path, arch)
    kernel_type = info.kernel_type
    spec = get_spec(kernel_type)

    def call(shape: Sequence[int], dtype: torch.dtype) -> Call:
        inputs = OpInputs(kernel_type, spec.parse_shape(tuple(shape)), dtype)
        return inputs.context, inputs

    calls = [call(shape, dtype) for shape in shapes or [spec.smoke_shape]
             for dtype in dtypes or spec.dtypes]
    return check_file(path, ENTRY_POINT, calls, execute=execute, arch=arch,
                      recorded_calls=[call(shape, dtype) for shape, dtype in recorded])


def format_result(result: AotResult) -> str:
    status = "ok  " if result.ok else "FAIL"
    usage = f"regs={result.n_regs} shared={result.shared_bytes} local={result.local_bytes}"
    text = (f"{status} {result.kernel} [{result.context}] warps={result.num_warps} "
            f"stages={result.num_stages} grid={result.grid} {usage}")
    if result.error:
        text += f"\n     error: {result.error}"
    for warning in result.warnings:
        text += f"\n     warning: {warning}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    from autokernel.ops.spec import parse_dtype

    parser = argparse.ArgumentParser(prog="python -m autokernel.aot",
                                     description="Compile a kernel.py's Triton kernels for Hopper "
                                                 "without a GPU.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="check a kernel.py")
    check.add_argument("path")
    check.add_argument("--shape", action="append", help="e.g. 8x1000 (repeatable)")
    check.add_argument("--dtype", action="append", help="fp16, bf16 or fp32 (repeatable)")
    check.add_argument("--no-execute", action="store_true",
                       help="record launches without interpreting them (GPU-sized shapes)")
    check.add_argument("--arch", type=int, default=HOPPER_ARCH, help="compute capability x10")
    check.add_argument("--json", action="store_true", help="print one JSON list")
    phase = commands.add_parser("_phase")  # internal: one phase in a suitable process
    phase.add_argument("name", choices=sorted(_PHASES))
    phase.add_argument("inbox")
    phase.add_argument("outbox")
    args = parser.parse_args(argv)

    if args.command == "_phase":
        payload = pickle.loads(Path(args.inbox).read_bytes())
        Path(args.outbox).write_bytes(pickle.dumps(_PHASES[args.name][1](*payload)))
        return 0
    shapes = [tuple(int(d) for d in s.lower().split("x")) for s in args.shape or []] or None
    dtypes = [parse_dtype(d) for d in args.dtype or []] or None
    results = check_kernel_file(args.path, shapes=shapes, dtypes=dtypes,
                                execute=not args.no_execute, arch=args.arch)
    if args.json:
        print(json.dumps([asdict(r) for r in results], default=str))
    else:
        print("\n".join(format_result(r) for r in results))
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy: the classes pickled between the
    # phases must be autokernel.aot's own.
    from autokernel.aot import main as module_main

    sys.exit(module_main())
