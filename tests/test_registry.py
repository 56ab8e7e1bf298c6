"""Invariants every registry entry must hold, whatever the op."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from autokernel import reference
from autokernel.harness.outputs import as_outputs
from autokernel.kernelfile import read_kernel_file
from autokernel.kernels import starter_path
from autokernel.ops import KERNEL_TYPES, get_spec
from autokernel.ops.spec import DISTRIBUTIONS

CPU_ELEMENT_BUDGET = 1 << 20  # interpreter shapes must stay small enough for seconds, not minutes


@pytest.fixture(params=KERNEL_TYPES)
def spec(request: pytest.FixtureRequest):
    return get_spec(request.param)


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def test_every_type_has_an_entry_named_after_it(spec) -> None:
    assert spec.name in KERNEL_TYPES
    # The first nine types' oracles live in reference.py; a later type's beside its op entry.
    assert spec.reference is reference.REFERENCES.get(spec.name, spec.reference)


def test_reference_signature_is_positional_and_documented(spec) -> None:
    params = inspect.signature(spec.reference).parameters.values()
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
    assert spec.reference.__doc__


def test_shapes_fit_the_dims(spec) -> None:
    groups = {
        "sweep": spec.sweep, "cpu_sweep": spec.cpu_sweep, "edge": spec.edge_shapes,
        "cpu_edge": spec.cpu_edge_shapes, "bench": spec.bench_shapes,
        "smoke": (spec.smoke_shape,),
    }
    for name, shapes in groups.items():
        assert shapes, name
        for shape in shapes:
            assert spec.parse_shape(shape) == tuple(shape), (name, shape)
    assert 8 <= len(spec.sweep) <= 10
    assert 2 <= len(spec.bench_shapes) <= 3
    for shape in (*spec.cpu_sweep, *spec.cpu_edge_shapes, spec.smoke_shape):
        assert _numel(shape) <= CPU_ELEMENT_BUDGET, shape


def test_edge_shapes_cover_odd_sizes_and_degenerate_rows(spec) -> None:
    dims = {d for shape in spec.edge_shapes for d in shape}
    assert any(d % 2 == 1 and d > 1 for d in dims), "needs a non-power-of-two odd dim"
    assert any(1 in shape for shape in (*spec.edge_shapes, *spec.cpu_edge_shapes)) or \
        spec.name == "flash_attention", "needs a 1-row or 1-column case"


def test_formulas_are_positive_and_scale(spec) -> None:
    for shape in spec.sweep:
        for dtype in spec.dtypes:
            assert spec.flops(shape) > 0
            assert spec.bytes(shape, dtype) > 0
    small, big = spec.bench_shapes[0], tuple(2 * d for d in spec.bench_shapes[0])
    assert spec.bytes(big, torch.float16) > spec.bytes(small, torch.float16)
    assert spec.bytes(small, torch.float32) > spec.bytes(small, torch.float16)


def test_tolerances_cover_each_dtype_and_admit_one_ulp(spec) -> None:
    for dtype in spec.dtypes:
        tol = spec.tolerance(dtype)
        assert tol.atol > 0 and tol.rtol > 0
        # A result one unit in the last place off a large value must pass.
        assert tol.rtol >= torch.finfo(dtype).eps, dtype
    assert spec.tolerance(torch.float32).rtol <= 1e-3, "fp32 must stay tight (precision downgrade)"


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_inputs_are_reproducible_finite_and_not_degenerate(spec, distribution: str) -> None:
    def make(seed: int):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        return spec.make_inputs(spec.smoke_shape, torch.float32, "cpu", gen, distribution)

    first, again, other = make(1), make(1), make(2)
    tensors = [a for a in first if isinstance(a, torch.Tensor)]
    assert tensors
    for a, b in zip(first, again):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
    floats = [t for t in tensors if t.is_floating_point()]
    assert all(torch.isfinite(t).all() for t in floats)
    assert any(t.unique().numel() > 1 for t in floats), "never constant inputs"
    assert any(
        isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(first, other)
    ), "the seed must matter"


def test_stock_path_agrees_with_reference(spec) -> None:
    gen = torch.Generator(device="cpu").manual_seed(0)
    args = spec.make_inputs(spec.smoke_shape, torch.float32, "cpu", gen, "normal")
    expected, got = as_outputs(spec.reference(*args)), as_outputs(spec.stock(*args))
    assert len(expected) == len(got) == spec.outputs
    tol = spec.tolerance(torch.float32)
    for one, reference_one in zip(got, expected):
        assert one.shape == reference_one.shape and one.dtype == reference_one.dtype
        torch.testing.assert_close(one, reference_one, atol=tol.atol, rtol=tol.rtol)


def test_reference_output_is_finite_on_adversarial_cases(spec) -> None:
    assert spec.adversarial, "each op needs adversarial cases"
    assert len({c.name for c in spec.adversarial}) == len(spec.adversarial)
    for case in spec.adversarial:
        gen = torch.Generator(device="cpu").manual_seed(3)
        for dtype in spec.dtypes:
            args = case.make_inputs(spec.smoke_shape, dtype, "cpu", gen)
            upcast = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                      else a for a in args]
            for out, native in zip(as_outputs(spec.reference(*upcast)),
                                    as_outputs(spec.reference(*args))):
                finite = torch.isfinite(out.to(native.dtype))
                if case.nonfinite_reference:  # by design: then it must also have finite outputs
                    assert finite.any() and not finite.all(), (case.name, dtype)
                else:
                    assert finite.all(), (case.name, dtype)


def test_starter_exists_and_declares_its_type(spec) -> None:
    info = read_kernel_file(starter_path(spec.name))
    assert info.kernel_type == spec.name and info.backend == "triton"
    for name, value in info.tunables.items():
        assert value in info.space[name], f"{name}={value!r} is outside TUNABLE_SPACE"
