"""The fused_mlp starter against the upcast reference: shapes, dtypes, distributions, traps,
tunables."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import triton
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
    covering_sample,
    dtype_tolerance_params,
    hopper_compile_problems,
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
    starter_space,
    sweep_cases,
)

from autokernel import reference
from autokernel.harness.runner import run_bench
from autokernel.harness.result import Status
from autokernel.kernels import starter_path
from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("fused_mlp")
KERNEL = load_starter("fused_mlp")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# (M, D, H): ragged everywhere with several K tiles in both reductions at every BLOCK_K; a single
# token; a single hidden unit. With the smallest blocks each spans several tiles, so grouping and
# wrap-around rows engage in both kernels.
TUNABLE_SHAPES = ((70, 130, 150), (1, 33, 257), (19, 64, 1))
TUNABLE_COMBINATIONS = covering_sample(starter_space("fused_mlp"), count=12, seed=0)
# The default blocks cover a CPU-sized problem in one tile; the adversarial cases also meet the
# smallest blocks, so multi-block paths run (several tiles in every dim of both kernels).
SMALL_BLOCKS = {"GATE_BLOCK_M": 16, "GATE_BLOCK_H": 32, "GATE_BLOCK_K": 32, "DOWN_BLOCK_M": 16,
                "DOWN_BLOCK_N": 32, "DOWN_BLOCK_K": 32}


_inputs = functools.partial(seeded_inputs, SPEC)


class _RefusesLargeLaunches:
    """Stands in for a @triton.jit kernel on a GPU short of shared memory: what it compiles
    (warmup) refuses to load when its BLOCK_K is over `max_block` or it has more than one pipeline
    stage, and otherwise runs as the real kernel."""

    def __init__(self, kernel, max_block: int) -> None:
        self.kernel, self.max_block = kernel, max_block
        self.compiles: list[tuple[int, int]] = []

    def warmup(self, *args, grid, num_warps: int, num_stages: int):
        block = args[self.kernel.arg_names.index("BLOCK_K")]
        self.compiles.append((block, num_stages))
        return _PickyCompiledKernel(self.kernel, block > self.max_block or num_stages > 1,
                                    num_warps, num_stages)

    def __getitem__(self, grid):
        raise AssertionError("launched through the JIT, not through its compiled kernel")


class _PickyCompiledKernel:
    def __init__(self, kernel, too_large: bool, num_warps: int, num_stages: int) -> None:
        self.kernel, self.too_large = kernel, too_large
        self.options = {"num_warps": num_warps, "num_stages": num_stages}

    def __getitem__(self, grid):  # a CompiledKernel checks its resources when it loads
        if self.too_large:
            raise triton.runtime.errors.OutOfResources(1 << 20, 1 << 17, "shared memory")
        return lambda *args: self.kernel[grid](*args, **self.options)


@pytest.mark.parametrize("shape, dtype, atol, rtol, distribution", sweep_cases(SPEC))
def test_matches_reference_small(shape, dtype, atol, rtol, distribution, device) -> None:
    args = _inputs(shape, dtype, device, distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.mark.gpu
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol, distribution) -> None:
    args = _inputs(shape, dtype, "cuda", distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.fixture(scope="module")
def small_block_kernel(tmp_path_factory: pytest.TempPathFactory):
    return load_starter_with("fused_mlp", SMALL_BLOCKS, tmp_path_factory.mktemp("blocks"))


@pytest.mark.parametrize("shape, blocks", [((40, 24, 72), "starter"), ((17, 96, 33), "starter"),
                                           ((40, 24, 72), "small_blocks")], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, blocks, device, small_block_kernel) -> None:
    kernel = KERNEL if blocks == "starter" else small_block_kernel
    assert_adversarial_case_passes(SPEC, kernel.kernel_fn, case, shape, dtype, device,
                                   f"{case.name} {shape} {blocks} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2048, 4096, 11008), (16, 4096, 11008), (1023, 4097, 1537)],
                         ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_saturated_silu_catches_a_naive_sigmoid(device) -> None:
    """The saturated case must be able to fail: exp(g) / (1 + exp(g)) is NaN past g = 88."""
    case = next(c for c in SPEC.adversarial if c.name == "saturated_silu")
    args = case.make_inputs((16, 32, 48), torch.float32, device, torch.Generator(device=device))
    x, w_gate, w_up, w_down = args

    def naive(*_):
        gate = x @ w_gate.t()
        hidden = gate * (torch.exp(gate) / (1 + torch.exp(gate))) * (x @ w_up.t())
        return hidden @ w_down.t()

    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, naive, args, "naive sigmoid")


def test_non_contiguous_inputs(device) -> None:
    x, w_gate, w_up, w_down = _inputs((40, 36, 50), torch.float16, device)
    column_major_x = x.t().contiguous().t()
    assert not column_major_x.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (column_major_x, w_gate, w_up, w_down),
                             "column-major x")
    fused = torch.cat([w_gate, w_up])  # a fused gate_up projection, split by views
    transposed_down = w_down.t().contiguous().t()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x, fused[:50], fused[50:], transposed_down),
                             "views of a fused gate_up weight, column-major w_down")


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((70, 130, 150), torch.bfloat16, device))
    assert_deterministic(KERNEL.kernel_fn, _inputs((33, 40, 200), torch.float32, device))


def test_writes_every_output_element(device, tmp_path: Path) -> None:
    module = load_starter_with("fused_mlp", {"GATE_BLOCK_M": 16, "DOWN_BLOCK_N": 32}, tmp_path)
    args = _inputs((37, 50, 150), torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, module.kernel_fn, args, "over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("fused_mlp", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("tunables", covering_sample(starter_space("fused_mlp"), count=12, seed=1)
                         + [{"GATE_BLOCK_M": 128, "GATE_BLOCK_H": 128, "GATE_BLOCK_K": 128,
                             "GATE_NUM_STAGES": 5, "DOWN_BLOCK_M": 128, "DOWN_BLOCK_N": 256,
                             "DOWN_BLOCK_K": 128, "DOWN_NUM_STAGES": 5,
                             "FP32_PRECISION": "tf32x3"}],
                         ids=lambda t: "-".join(map(str, t.values())))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_tunable_combination_compiles_and_stays_correct_gpu(tunables, dtype, tmp_path) -> None:
    """Compiles for real (shared-memory limits, tf32x3): the interpreter checks neither."""
    module = load_starter_with("fused_mlp", tunables, tmp_path)
    for shape in ((1000, 1100, 1300), (16, 4096, 11008)):
        args = _inputs(shape, dtype, "cuda")
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("fused_mlp")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((33, 20, 48), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")


@pytest.mark.parametrize("kernel_name", ["gate_up_kernel", "down_kernel"])
def test_shrinks_until_the_launch_fits(kernel_name, device, tmp_path: Path, monkeypatch) -> None:
    """Out of shared memory: fewer stages, then a smaller BLOCK_K, until the compiled kernel
    fits; the plan that fits is kept, so the next call compiles nothing."""
    module = load_starter_with("fused_mlp", {"GATE_BLOCK_K": 128, "GATE_NUM_STAGES": 4,
                                             "DOWN_BLOCK_K": 128, "DOWN_NUM_STAGES": 4}, tmp_path)
    picky = _RefusesLargeLaunches(getattr(module, kernel_name), max_block=32)
    monkeypatch.setattr(module, kernel_name, picky)
    args = _inputs((40, 200, 150), torch.float32, device)
    assert_matches_reference(SPEC, module.kernel_fn, args, "after shrinking")
    assert picky.compiles[-1] == (32, 1)
    assert picky.compiles == sorted(picky.compiles, reverse=True)  # only ever shrinks
    compiled = len(picky.compiles)
    assert_matches_reference(SPEC, module.kernel_fn, _inputs((40, 200, 150), torch.float32,
                                                             device, seed=1), "planned")
    assert len(picky.compiles) == compiled


def test_rejects_mismatched_operands(device) -> None:
    x, w_gate, w_up, w_down = _inputs((8, 16, 24), torch.float16, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, w_gate, w_up, w_down.t())
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, w_gate, w_up[:8], w_down)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, w_gate.float(), w_up, w_down)


# ---------------------------------------------------------------------------------------------
# GeGLU: the activation param ("gelu" exact, "gelu_tanh"), on the same kernel type

GELU_FORMS = ("gelu", "gelu_tanh")
NEEDS_INTERPRETER = pytest.mark.skipif(torch.cuda.is_available(), reason="checked by GPU tests")


def test_inputs_carry_the_activation_only_for_geglu(device) -> None:
    """A SwiGLU's inputs stay the four tensors (kernels written before GeGLU take those), and
    are the very tensors they were; a GeGLU's end with the activation's name."""
    swiglu = _inputs((8, 16, 24), torch.float32, device)
    assert len(swiglu) == 4
    default = _inputs((8, 16, 24), torch.float32, device, activation="silu")
    assert all(torch.equal(a, b) for a, b in zip(swiglu, default))
    geglu = _inputs((8, 16, 24), torch.float32, device, activation="gelu_tanh")
    assert geglu[-1] == "gelu_tanh" and all(torch.equal(a, b) for a, b in zip(swiglu, geglu))
    with pytest.raises(ValueError):
        _inputs((8, 16, 24), torch.float32, device, activation="relu")
    with pytest.raises(ValueError):
        _inputs((8, 16, 24), torch.float32, device, eps=1e-5)


@pytest.mark.parametrize("distribution", ("normal", "large"))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("shape", SPEC.cpu_sweep[:3] + SPEC.cpu_edge_shapes[:2], ids=str)
@pytest.mark.parametrize("activation", GELU_FORMS)
def test_geglu_matches_reference_small(activation, shape, dtype, distribution, device) -> None:
    args = _inputs(shape, dtype, device, distribution, activation=activation)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{activation} {shape} {dtype}")


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
@pytest.mark.parametrize("activation", GELU_FORMS)
def test_geglu_adversarial(activation, case, dtype, device, small_block_kernel) -> None:
    args = case.make_inputs((40, 24, 72), dtype, device, torch.Generator(device=device)
                            .manual_seed(1), activation=activation)
    assert args[-1] == activation
    assert_matches_reference(SPEC, small_block_kernel.kernel_fn, args,
                             f"{case.name} {activation} {dtype}")


@pytest.mark.parametrize("activation, impostor", [("gelu", "gelu_tanh"), ("gelu_tanh", "gelu"),
                                                  ("gelu", "sigmoid"), ("silu", "gelu")])
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_negative_gate_tail_catches_the_wrong_activation(activation, impostor, dtype,
                                                         device) -> None:
    """In GELU's negative tail the two GELU forms differ by 3-45%, x·sigmoid(1.702x) by 2-35x:
    a kernel computing the wrong one fails the case in every dtype."""
    case = next(c for c in SPEC.adversarial if c.name == "negative_gate_tail")
    args = case.make_inputs((40, 24, 72), dtype, device, torch.Generator(device=device)
                            .manual_seed(1), activation=activation)

    def wrong_activation(x, w_gate, w_up, w_down, *_):
        gate = x.float() @ w_gate.float().t()
        act = gate * torch.sigmoid(1.702 * gate) if impostor == "sigmoid" else \
            reference.mlp_activation(gate, impostor)
        hidden = (act * (x.float() @ w_up.float().t())).to(x.dtype)
        return (hidden.float() @ w_down.float().t()).to(x.dtype)

    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, wrong_activation, args, f"{impostor} for {activation}")


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_geglu_stock_agrees_with_reference(dtype, device) -> None:
    for activation in GELU_FORMS:
        args = _inputs((33, 20, 48), dtype, device, "uniform", activation=activation)
        assert_matches_reference(SPEC, SPEC.stock, args, f"stock {activation} {dtype}")


def test_an_unknown_activation_is_refused(device) -> None:
    x, w_gate, w_up, w_down = _inputs((8, 16, 24), torch.float32, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(x, w_gate, w_up, w_down, "relu")


def test_cuda_starter_refuses_geglu_so_a_routed_call_falls_back() -> None:
    """The CUDA starter is SwiGLU only: a GeGLU call raises NotImplementedError (the router's
    cue to leave the call to PyTorch) before anything is built."""
    import importlib.util

    path = starter_path("fused_mlp").parent / "cuda" / "fused_mlp.py"
    module_spec = importlib.util.spec_from_file_location("cuda_fused_mlp_geglu", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    x, w_gate, w_up, w_down = _inputs((8, 16, 24), torch.float32, "cpu")
    for activation in GELU_FORMS:
        with pytest.raises(NotImplementedError):
            module.kernel_fn(x, w_gate, w_up, w_down, activation)
    assert module.EXTENSION._library is None


@pytest.mark.parametrize("activation", GELU_FORMS)
def test_geglu_starter_passes_the_harness(activation, tmp_path: Path) -> None:
    """The whole harness (smoke, sweep, stability with the adversarial cases, determinism, edges)
    on a GeGLU target: the activation reaches every stage's inputs. fp32 only to stay fast on the
    interpreter; the other dtypes are covered above."""
    result = run_bench(starter_path("fused_mlp"), device="cpu", quick=True, timeout_s=300,
                       correctness_dtypes=["fp32"], correctness_only=True,
                       params={"activation": activation}, cache_dir=tmp_path / "cache")
    assert result.status is Status.PASS, result.reason


@NEEDS_INTERPRETER
def test_geglu_launches_compile_for_hopper(tmp_path: Path) -> None:
    """Each GELU form's gate/up kernel builds for sm_90 (H100/H200), checked without a GPU
    through Triton's compiler (tl.math.erf lowers to libdevice). bf16 only: each build takes
    seconds here, and the epilogue is the same fp32 code in every dtype."""
    calls = [((2048, 4096, 11008), torch.bfloat16)]
    for activation in GELU_FORMS:
        problems = hopper_compile_problems("fused_mlp", [{}], calls, tmp_path,
                                           params={"activation": activation})
        assert not problems, "\n".join(problems)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2048, 4096, 11008), (16, 4096, 11008), (1023, 4097, 1537)],
                         ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("activation", GELU_FORMS)
def test_geglu_matches_reference_gpu(activation, dtype, shape) -> None:
    for distribution in DISTRIBUTIONS:
        args = _inputs(shape, dtype, "cuda", distribution, activation=activation)
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args,
                                 f"{activation} {shape} {dtype} {distribution}")
    for case in SPEC.adversarial:
        args = case.make_inputs(shape, dtype, "cuda", torch.Generator(device="cuda")
                                .manual_seed(1), activation=activation)
        assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{case.name} {activation}")
