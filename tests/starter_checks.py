"""Checks shared by the per-op starter tests: reference comparison, tunable loading, NaN garbage.

Each `tests/test_<op>.py` parametrizes over its own OpSpec and calls these, so the rule for "the
starter is correct" is written once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from autokernel.kernelfile import parse_kernel_source, set_tunables
from autokernel.kernels import starter_path
from autokernel.ops.spec import DISTRIBUTIONS, AdversarialCase, Inputs, OpSpec, Shape, dtype_name


def upcast(args: Inputs) -> Inputs:
    """Floating tensors to float64; everything else unchanged.

    Always float64, even at GPU sizes where the harness settles for float32: the strictest oracle
    (torch's float32 layer_norm alone was off by up to 30x the float32 tolerance on large-mean rows
    before reference.layernorm learnt to shift them).
    """
    return tuple(
        a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )


def assert_matches_reference(
    spec: OpSpec, fn: Callable[..., Any], args: Inputs, label: str = "",
    params: dict[str, Any] | None = None,
) -> Any:
    """Run `fn(*args)` and check shape, dtype, finiteness and closeness to the upcast oracle, at
    the tolerance of a target with `params` (reduce's op). Where the oracle, rounded to the
    output's dtype, is ±inf or NaN the output must be the same (the harness's rule). A type with
    several outputs (`OpSpec.outputs`) returns a tuple of them, each checked so."""
    dtype = args[0].dtype
    out = fn(*args)
    expected_like, oracle = spec.reference(*args), spec.reference(*upcast(args))
    tol = spec.tolerance(dtype, params)
    if spec.outputs == 1:
        _assert_close(out, expected_like, oracle, tol, label)
        return out
    assert isinstance(out, tuple) and len(out) == spec.outputs, f"{label}: returned {type(out)}"
    for position, (one, like, one_oracle) in enumerate(zip(out, expected_like, oracle)):
        _assert_close(one, like, one_oracle, tol, f"{label} output {position + 1}")
    return out


def _assert_close(out: torch.Tensor, expected_like: torch.Tensor, oracle: torch.Tensor,
                  tol: Any, label: str) -> None:
    assert out.shape == expected_like.shape, f"{label}: shape {out.shape} != {expected_like.shape}"
    assert out.dtype == expected_like.dtype, f"{label}: dtype {out.dtype} != {expected_like.dtype}"
    got = out.to(oracle.dtype)
    error = (got - oracle).abs()
    allowed = tol.atol + tol.rtol * oracle.abs()
    rounded = oracle.to(out.dtype).to(oracle.dtype)
    same = (got == rounded) | (got.isnan() & rounded.isnan())
    # An unexpected NaN counts as bad: error <= allowed is False for it.
    bad = torch.where(rounded.isfinite(), ~(error <= allowed), ~same)
    if bad.any():
        worst = int(torch.argmax(torch.where(bad, error / allowed, 0).flatten().nan_to_num(1e30)))
        raise AssertionError(
            f"{label}: {int(bad.sum())}/{bad.numel()} elements off (atol={tol.atol}, "
            f"rtol={tol.rtol}); worst at flat index {worst}: got "
            f"{got.flatten()[worst].item()}, expected {oracle.flatten()[worst].item()}"
        )


def dtype_tolerance_params(spec: OpSpec) -> list[Any]:
    """(dtype, atol, rtol) for each of the op's dtypes, as pytest params named by dtype."""
    return [pytest.param(dt, spec.tolerance(dt).atol, spec.tolerance(dt).rtol, id=dtype_name(dt))
            for dt in spec.dtypes]


def sweep_cases(spec: OpSpec) -> list[Any]:
    """(shape, dtype, atol, rtol, distribution) for the CPU sweep: every shape in every dtype
    once, the value distributions rotated over them, so that each (dtype, distribution) pair
    is met too wherever the sweep has at least as many shapes as distributions (it does for
    every op). The full product of the three (4x the cases) runs on the GPU sweep; under the
    CPU interpreter it was a tenth of CI's time for little more coverage."""
    shapes = spec.cpu_sweep + spec.cpu_edge_shapes
    cases = []
    for i, shape in enumerate(shapes):
        for j, dtype in enumerate(spec.dtypes):
            distribution = DISTRIBUTIONS[(i + j) % len(DISTRIBUTIONS)]
            tolerance = spec.tolerance(dtype)
            cases.append(pytest.param(shape, dtype, tolerance.atol, tolerance.rtol, distribution,
                                      id=f"{shape}-{dtype_name(dtype)}-{distribution}"))
    return cases


def seeded_inputs(spec: OpSpec, shape: Shape, dtype: torch.dtype, device: str,
                  distribution: str = "normal", seed: int = 0, **params: Any) -> Inputs:
    """The op's inputs from its own generator, seeded so a failure replays."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return spec.make_inputs(shape, dtype, device, generator, distribution, **params)


def assert_adversarial_case_passes(spec: OpSpec, fn: Callable[..., torch.Tensor],
                                   case: AdversarialCase, shape: Shape, dtype: torch.dtype,
                                   device: str, label: str = "") -> None:
    generator = torch.Generator(device=device).manual_seed(1)
    args = case.make_inputs(shape, dtype, device, generator)
    assert_matches_reference(spec, fn, args, label or f"{case.name} {shape} {dtype}")


def load_kernel_module(source: str, directory: Path, name: str) -> ModuleType:
    """Import kernel source from a real file (Triton's @jit reads its function's source)."""
    path = directory / f"{name}.py"
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # names are unique per combination; kept for inspect/Triton
    module_spec.loader.exec_module(module)
    return module


def load_starter(kernel_type: str) -> ModuleType:
    return importlib.import_module(f"autokernel.kernels.{kernel_type}")


def load_starter_with(
    kernel_type: str, tunables: dict[str, Any], directory: Path
) -> ModuleType:
    """The starter with `tunables` rewritten in its source, imported from `directory`."""
    source = set_tunables(starter_path(kernel_type).read_text(), tunables)
    tag = "_".join(f"{v}" for v in tunables.values()).replace(".", "p").replace("-", "m")
    return load_kernel_module(source, directory, f"{kernel_type}_{tag}")


def starter_space(kernel_type: str) -> dict[str, list[Any]]:
    return parse_kernel_source(starter_path(kernel_type).read_text()).space


def covering_sample(space: dict[str, list[Any]], count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` combinations in which every value of every tunable appears at least once.

    Each tunable cycles through its own shuffled value list, so values pair up differently per
    tunable; the sample is deterministic for a given seed.
    """
    count = max(count, max(len(v) for v in space.values()))
    rng = random.Random(seed)
    orders = {name: rng.sample(values, len(values)) for name, values in space.items()}
    return [{name: order[i % len(order)] for name, order in orders.items()} for i in range(count)]


def corner_combinations(space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Per VARIANT, every tunable at its first listed value, then every one at its last: with
    spaces listed small to large, the least and the most resource-hungry launches."""
    variants = space.get("VARIANT", [None])
    corners = []
    for variant in variants:
        for end in (0, -1):
            combo = {name: values[end] for name, values in space.items()}
            if variant is not None:
                combo["VARIANT"] = variant
            corners.append(combo)
    return corners


@contextlib.contextmanager
def nan_filled_allocations() -> Iterator[None]:
    """Make torch.empty / torch.empty_like return NaN-filled floating tensors for the duration.

    An output element the kernel forgets to write then shows up as NaN, on CPU and GPU alike
    (a freed-then-reused block is not guaranteed to hold garbage).
    """
    original_empty, original_empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(float("nan")) if t.is_floating_point() else t

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        return poison(original_empty(*args, **kwargs))

    def empty_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        return poison(original_empty_like(*args, **kwargs))

    torch.empty, torch.empty_like = empty, empty_like
    try:
        yield
    finally:
        torch.empty, torch.empty_like = original_empty, original_empty_like


def assert_deterministic(fn: Callable[..., Any], args: Inputs, runs: int = 3) -> None:
    def bits(out: Any) -> torch.Tensor:
        # Bitwise: NaN payloads and -0.0 count; several outputs end to end.
        outputs = out if isinstance(out, tuple) else (out,)
        return torch.cat([t.reshape(-1).view(torch.uint8) for t in outputs])

    first = bits(fn(*args))
    for _ in range(runs - 1):
        assert torch.equal(first, bits(fn(*args))), "two runs on the same input differ bitwise"



def hopper_compile_problems(
    kernel_type: str,
    combinations: list[dict[str, Any]],
    calls: list[tuple[tuple[int, ...], torch.dtype]],
    directory: Path,
    forbid_spills: bool = False,
    params: dict[str, Any] | None = None,
) -> list[str]:
    """Compile what the starter launches, under each tunable combination and call, for sm_90,
    with the inputs a target with `params` gets (fused_mlp's activation).

    Launches are recorded in this (interpreting) process without running them, then compiled
    together in one child process by autokernel.aot. That is sound because the combinations
    differ only in launcher literals: the @triton.jit source is the starter's for all of them.
    Returns one line per failure (and per spilling build when `forbid_spills`).
    """
    from autokernel.aot import compile_requests, format_result, record_call, triton_interprets
    from autokernel.ops import get_spec

    assert triton_interprets(), "launches are recorded under the Triton interpreter"
    spec = get_spec(kernel_type)
    requests, problems = [], []
    for tunables in combinations:
        module = load_starter_with(kernel_type, tunables, directory) if tunables else \
            load_starter(kernel_type)
        for shape, dtype in calls:
            args = spec.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(0),
                                    **(params or {}))
            found, failed = record_call(module.kernel_fn, args, execute=False,
                                        context=f"{tunables or 'defaults'} {shape} {dtype}")
            requests += found
            problems += [format_result(r) for r in failed]
    for result in compile_requests(starter_path(kernel_type), requests):
        if not result.ok or (forbid_spills and result.local_bytes):
            problems.append(format_result(result))
    return problems
