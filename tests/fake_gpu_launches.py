"""Runs starters' GPU launch path on a machine without a GPU, for tests/test_launch_plans.py.

Run as a child process with TRITON_INTERPRET=0: kernels are then real `JITFunction`s, as on a GPU.
A stand-in driver reports an sm_90 device, and a stand-in `triton.compiler.compile` returns a real
`CompiledKernel` subclass that skips code generation and records each launch instead of running
it. What a starter does on the host is therefore exactly what it does on a GPU: plan, warm-up
(compile), `CompiledKernel[grid](...)` or `JITFunction[grid](...)`.

For every launch, the arguments it was given are specialized again by Triton's own binder (the
divisibility, ==1 and alignment rules the JIT applies) and compared with the specialization the
launched kernel was compiled for: a cached compiled kernel reused for arguments of another
specialization computes wrong results on a GPU, and shows up here as a mismatch.

Prints one JSON object: per kernel type, the launches seen through each path and the problems.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch
import triton
import triton.compiler
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, CompiledKernel, make_backend
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction, create_function_from_signature

from autokernel.ops import get_spec

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
# Beyond the op's CPU shapes: rows too long for registers (the streaming variants), few long rows
# (reduce's split_n), a row count divisible by 16 (another integer specialization).
EXTRA_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "softmax": [(3, 20000), (32, 64)],
    "rmsnorm": [(3, 20000), (32, 64)],
    "layernorm": [(3, 20000), (32, 64)],
    "reduce": [(2, 40000), (32, 64)],
    "cross_entropy": [(32, 64)],
    "rotary_embedding": [(2, 16, 32, 64)],
    "fused_mlp": [(32, 64, 128)],
}


class Recorder:
    def __init__(self) -> None:
        self.launches: list[tuple[ASTSource, tuple[int, int, int], tuple[Any, ...]]] = []
        self.compiles = 0
        self.jit_runs: Counter[str] = Counter()  # "launch" / "warmup"


RECORDER = Recorder()


class RecordingCompiledKernel(CompiledKernel):
    """A CompiledKernel without code: already "loaded", its launcher records the launch."""

    def __init__(self, src: ASTSource, options: dict[str, Any]) -> None:
        self.src = src
        self.name = src.name
        self.options = options
        self.module, self.function, self.packed_metadata = "loaded", src.name, None
        self._run = self._record

    def _record(self, grid_0: int, grid_1: int, grid_2: int, stream: Any, function: Any,
                packed_metadata: Any, launch_metadata: Any, enter_hook: Any, exit_hook: Any,
                *args: Any) -> None:
        RECORDER.launches.append((self.src, (grid_0, grid_1, grid_2), args))


def fake_compile(src: ASTSource, target: Any = None, options: dict[str, Any] | None = None,
                 **_: Any) -> RecordingCompiledKernel:
    RECORDER.compiles += 1
    return RecordingCompiledKernel(src, dict(options or {}))


class StandInUtils:
    def get_device_properties(self, device: int) -> dict[str, int]:
        return {"max_shared_mem": 232448, "multiprocessor_count": 132}

    def load_binary(self, name: str, kernel: Any, shared: int, device: int) -> tuple[Any, ...]:
        return "loaded", name, 64, 0, 1024


class StandInDriver:
    """What Triton's runtime asks of the active driver, for one sm_90 device."""

    utils = StandInUtils()

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return TARGET


def install() -> None:
    triton.compiler.compile = fake_compile  # read by JITFunction when it builds its binder
    driver.set_active(StandInDriver())
    original_run = JITFunction.run

    def counting_run(self: JITFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        RECORDER.jit_runs["warmup" if warmup else "launch"] += 1
        return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.run = counting_run


def specialization_problem(src: ASTSource, args: tuple[Any, ...]) -> str | None:
    """How Triton would specialize `args` differently from what `src` was compiled for."""
    jit = src.fn
    binder = create_function_from_signature(jit.signature, jit.params, BACKEND)
    bound, specialization, options = binder(*args)
    _, signature, constexprs, attrs = jit._pack_args(BACKEND, {}, bound, specialization, options)
    for label, wanted, compiled in (("signature", signature, src.signature),
                                    ("constexprs", constexprs, src.constants),
                                    ("attrs", attrs, src.attrs)):
        if dict(wanted) != dict(compiled):
            return f"{src.name}: {label} {compiled} compiled, {wanted} for the launch's arguments"
    return None


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` one element past a 16-byte boundary (as a view at an offset may be)."""
    size, offset = t.numel() * t.element_size(), t.element_size()
    buffer = torch.empty(size + 16, dtype=torch.uint8)
    shifted = buffer[offset:offset + size].view(t.dtype).view(t.shape)
    shifted.copy_(t)
    return shifted


def check(kernel_type: str, shapes: list[tuple[int, ...]], dtypes: list[torch.dtype]
          ) -> dict[str, Any]:
    import importlib

    module = importlib.import_module(f"autokernel.kernels.{kernel_type}")
    spec = get_spec(kernel_type)
    calls = [spec.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(0))
             for shape in shapes for dtype in dtypes]
    first = len(RECORDER.launches)
    for args in calls:
        module.kernel_fn(*args)
    runs_before, compiles_before = Counter(RECORDER.jit_runs), RECORDER.compiles
    for args in calls:  # the same keys again, fresh tensors: every plan comes from the cache
        module.kernel_fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    repeat_jit_runs = sum((RECORDER.jit_runs - runs_before).values())
    repeat_compiles = RECORDER.compiles - compiles_before
    jit_launches_before = RECORDER.jit_runs["launch"]
    for args in calls:  # the first tensor at an odd address: Triton's JIT must take it
        module.kernel_fn(misaligned(args[0]), *args[1:])
    misaligned_jit_launches = RECORDER.jit_runs["launch"] - jit_launches_before

    problems = [p for src, _, args in RECORDER.launches[first:]
                if (p := specialization_problem(src, args)) is not None]
    return {"launches": len(RECORDER.launches) - first, "problems": sorted(set(problems)),
            "repeat_jit_runs": repeat_jit_runs, "repeat_compiles": repeat_compiles,
            "misaligned_calls": len(calls), "misaligned_jit_launches": misaligned_jit_launches,
            "calls": calls}


def ghost_replay(monitor: Any, kernel_fn: Any, calls: list[tuple[Any, ...]]) -> dict[str, int]:
    """Call under the harness's launch monitor in ghost mode, through both paths (aligned and
    misaligned tensors): every launch must be seen by the monitor and none may run."""
    monitor.ghost = monitor.armed = True
    seen, ran = monitor.launches, len(RECORDER.launches)
    try:
        for args in calls:
            kernel_fn(*args)
            kernel_fn(misaligned(args[0]), *args[1:])
    finally:
        monitor.ghost = monitor.armed = False
    return {"ghost_calls": 2 * len(calls), "ghost_monitored_launches": monitor.launches - seen,
            "ghost_launches_run": len(RECORDER.launches) - ran}


def main(kernel_types: list[str]) -> None:
    import importlib

    from autokernel.harness.guards import LaunchMonitor

    install()
    report = {}
    for kernel_type in kernel_types:
        spec = get_spec(kernel_type)
        shapes = list(dict.fromkeys(spec.cpu_sweep[:3] + spec.cpu_edge_shapes
                                    + tuple(EXTRA_SHAPES.get(kernel_type, ()))))
        report[kernel_type] = check(kernel_type, shapes, [torch.float16, torch.float32])
    monitor = LaunchMonitor("cpu")  # last: its hooks stay installed
    monitor.install()
    for kernel_type in kernel_types:
        kernel_fn = importlib.import_module(f"autokernel.kernels.{kernel_type}").kernel_fn
        report[kernel_type] |= ghost_replay(monitor, kernel_fn, report[kernel_type].pop("calls"))
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
