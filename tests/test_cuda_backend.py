"""The CUDA C++ backend's CPU-checkable foundation (issue 15): the kernel-file format, the nvcc
build and its cache, compile errors, the SKIPPED verdict on the CPU, the AOT check, and every
CUDA starter compiled for sm_90a (the CI machine has nvcc 13; without nvcc those tests skip).
The GPU tests at the end run the starters against the references on a real device."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autokernel.cuda.build import (CudaBuildError, arch_for_capability, build_extension,
                                   find_nvcc, gencode_flags)
from autokernel.harness.result import Status
from autokernel.kernelfile import (KernelFileError, cuda_defines, cuda_source_text,
                                   parse_kernel_source, read_kernel_file, set_tunables)

CUDA_STARTERS_DIR = Path(__file__).resolve().parents[1] / "autokernel" / "kernels" / "cuda"
CUDA_STARTERS = sorted(CUDA_STARTERS_DIR.glob("*.py"))
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (CUDA toolkit absent)")

TINY_SOURCE = """
#include <stdint.h>
__global__ void fill(float* out, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = VALUE;
}
extern "C" int fill_launch(void* out, int64_t n, cudaStream_t stream) {
    if (n > 0) fill<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((float*)out, n);
    return (int)cudaGetLastError();
}
"""


def cuda_file(**extra: str) -> str:
    fields = {"KERNEL_TYPE": '"reduce"', "BACKEND": '"cuda"', "BLOCK": "256",
              "VARIANT": '"fast"', "TUNABLE_SPACE": '{"BLOCK": [128, 256], '
                                                   '"VARIANT": ["fast", "exact"]}',
              "CUDA_SOURCE": 'r"""__global__ void k() {}"""', **extra}
    body = "".join(f"{name} = {value}\n" for name, value in fields.items() if value)
    return body + "def kernel_fn(x, axis=-1):\n    return x\n"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One nvcc cache for the session: each starter compiles once however many tests use it."""
    return tmp_path_factory.mktemp("cuda-cache")


# -- the format -----------------------------------------------------------------------------------

def test_cuda_file_parses_with_source_and_defines() -> None:
    info = parse_kernel_source(cuda_file())
    assert (info.backend, info.cuda_source, info.cuda_file) == ("cuda", "__global__ void k() {}",
                                                                None)
    assert cuda_defines(info.tunables) == {"BLOCK": "256", "VARIANT": "fast"}
    edited = parse_kernel_source(set_tunables(cuda_file(), {"BLOCK": 128, "VARIANT": "exact"}))
    assert cuda_defines(edited.tunables) == {"BLOCK": "128", "VARIANT": "exact"}


def test_cuda_file_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(KernelFileError, match="exactly one of CUDA_SOURCE"):
        parse_kernel_source(cuda_file(CUDA_SOURCE=""))
    with pytest.raises(KernelFileError, match="exactly one of CUDA_SOURCE"):
        parse_kernel_source(cuda_file(CUDA_FILE='"k.cu"'))
    with pytest.raises(KernelFileError, match="beside kernel.py"):
        parse_kernel_source(cuda_file(CUDA_SOURCE="", CUDA_FILE='"../k.cu"'))
    text = cuda_file(CUDA_SOURCE="", CUDA_FILE='"k.cu"')
    (tmp_path / "kernel.py").write_text(text)
    (tmp_path / "k.cu").write_text("// the sibling source\n")
    info = read_kernel_file(tmp_path / "kernel.py")
    assert cuda_source_text(info, tmp_path / "kernel.py") == "// the sibling source\n"


def test_tunables_a_define_cannot_carry_are_refused() -> None:
    with pytest.raises(KernelFileError, match="-D define"):
        parse_kernel_source(cuda_file(VARIANT='"not an identifier"',
                                      TUNABLE_SPACE='{"VARIANT": ["not an identifier"]}'))
    assert cuda_defines({"ON": True, "SCALE": 0.5}) == {"ON": "1", "SCALE": "0.5"}


def test_arch_targets() -> None:
    assert [arch_for_capability(*c) for c in ((9, 0), (8, 0), (8, 9))] == ["sm_90a", "sm_80",
                                                                            "sm_89"]
    assert gencode_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(ValueError):
        gencode_flags("sm_90a; rm -rf")


# -- build, cache, errors -------------------------------------------------------------------------

@needs_nvcc
def test_build_is_cached_by_content(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_extension(TINY_SOURCE, {"VALUE": "1.0f"}, arch="sm_90a", cache_dir=build_cache)
    assert first.library.is_file() and not first.cached and first.seconds > 0
    assert "fill" in first.ptxas_log

    import subprocess

    def no_nvcc(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached build ran nvcc")

    monkeypatch.setattr(subprocess, "run", no_nvcc)
    again = build_extension(TINY_SOURCE, {"VALUE": "1.0f"}, arch="sm_90a", cache_dir=build_cache)
    assert (again.cached, again.library, again.seconds) == (True, first.library, 0.0)
    monkeypatch.undo()
    other = build_extension(TINY_SOURCE, {"VALUE": "2.0f"}, arch="sm_90a", cache_dir=build_cache)
    assert other.key != first.key and not other.cached


@needs_nvcc
def test_compile_error_carries_the_first_nvcc_lines(tmp_path: Path) -> None:
    source = "__global__ void k(float* y) {\n    y[0] = undefined_name;\n}\n"
    with pytest.raises(CudaBuildError) as caught:
        build_extension(source, {}, arch="sm_90a", cache_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith("CUDA_SOURCE line 2: error:") and "undefined_name" in message
    assert "undefined_name" in caught.value.detail and str(tmp_path) not in caught.value.detail
    assert not list((tmp_path / "cuda").rglob("*.so"))


# -- the harness and the AOT check on the CPU ----------------------------------------------------

def test_cuda_kernel_on_cpu_is_skipped_not_rejected(tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench

    result = run_bench(CUDA_STARTERS_DIR / "reduce.py", device="cpu", cache_dir=tmp_path)
    assert result.status is Status.SKIPPED and not result.passed
    assert "needs a GPU" in result.reason and result.stages == {"static_scan": "pass"}
    assert result.backend == "cuda"


def test_cuda_kernel_scan_still_rejects_on_cpu(tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench

    source = (CUDA_STARTERS_DIR / "reduce.py").read_text()
    bad = tmp_path / "kernel.py"
    bad.write_text(source.replace("#include <stdint.h>", "#include <cublas_v2.h>"))
    result = run_bench(bad, device="cpu", cache_dir=tmp_path)
    assert result.status is Status.REJECTED and result.rule == "import-not-allowed"


def test_skipped_is_never_kept() -> None:
    from autokernel.harness.result import BenchResult
    from autokernel.loop.keep import verdict_for

    result = BenchResult(status=Status.SKIPPED, reason="needs a GPU")
    # A non-PASS result is decided before its measurement is read.
    verdict = verdict_for(result, None, None, 0.01, {})  # type: ignore[arg-type]
    assert verdict.status == "rejected" and "needs a GPU" in verdict.reason


@needs_nvcc
def test_aot_check_reports_resources_or_errors(build_cache: Path, tmp_path: Path,
                                               starter_builds: dict[str, object]) -> None:
    from autokernel.cuda.aot import check_cuda_kernel_file

    results = check_cuda_kernel_file(CUDA_STARTERS_DIR / "reduce.py", cache_dir=build_cache)
    assert results and all(r.ok and r.n_regs and r.local_bytes == 0 for r in results)
    assert {r.context.split(",")[0] for r in results} == {"sm_90a"}
    broken = tmp_path / "kernel.py"
    broken.write_text((CUDA_STARTERS_DIR / "reduce.py").read_text().replace(
        "acc = block_combine<OP>(acc);", "acc = block_combine<OP>(acc, 1);"))
    [failed] = check_cuda_kernel_file(broken, cache_dir=build_cache)
    assert not failed.ok and "error" in failed.error and "CUDA_SOURCE line" in failed.error


# -- CI: every CUDA starter compiles for sm_90a ---------------------------------------------------

@pytest.fixture(scope="session")
def starter_builds(build_cache: Path) -> dict[str, object]:
    """Every CUDA starter built for sm_90a, nvcc runs side by side (a BuildResult or the
    CudaBuildError, by starter name)."""
    from concurrent.futures import ThreadPoolExecutor

    from autokernel.cuda.harness import prebuild

    def build(path: Path) -> object:
        try:
            return prebuild(read_kernel_file(path), path, build_cache, timeout_s=300,
                            arch="sm_90a")
        except CudaBuildError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((p.stem for p in CUDA_STARTERS), pool.map(build, CUDA_STARTERS)))


@needs_nvcc
@pytest.mark.parametrize("path", CUDA_STARTERS, ids=lambda p: p.stem)
def test_cuda_starter_compiles_for_sm90a(path: Path, starter_builds: dict[str, object]) -> None:
    from autokernel.harness.static_scan import scan_source

    info = read_kernel_file(path)
    assert info.backend == "cuda" and info.kernel_type == path.stem
    assert scan_source(path.read_text()) == []
    assert path.read_text().startswith('"""'), "a starter opens with its algorithm and limits"
    built = starter_builds[path.stem]
    assert not isinstance(built, CudaBuildError), f"{path.name} does not compile: {built}"
    assert "spill stores" in built.ptxas_log  # type: ignore[attr-defined]
    assert "bytes spill stores" not in built.ptxas_log.replace(  # type: ignore[attr-defined]
        " 0 bytes spill stores", "")


def test_cuda_starters_import_without_a_gpu() -> None:
    """load_extension is lazy: importing a CUDA kernel file builds nothing."""
    import importlib.util

    for path in CUDA_STARTERS:
        spec = importlib.util.spec_from_file_location(f"cuda_starter_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.EXTENSION._library is None


# -- program.md's CUDA section names real APIs -----------------------------------------------------

PROGRAM_MD = Path(__file__).resolve().parents[1] / "autokernel" / "agents" / "program.md"
# CUDA C++ identifiers as program.md writes them: intrinsics and types (`__shfl_xor_sync`), runtime
# and driver API (`cudaFuncSetAttribute`, `cuTensorMapEncodeTiled`, `CUtensorMap`) and namespaced
# names (`wmma::mma_sync`, `cuda::memcpy_async`), of which the last component is looked up.
CUDA_NAME = re.compile(r"\b(?:__[a-z]\w*|cuda[A-Z]\w*|cu[A-Z]\w+|CU[a-z]\w+|"
                       r"(?:nvcuda|wmma|cuda)(?:::\s*\w+)+)")


def cuda_include_dir() -> Path | None:
    """The CUDA toolkit's include folder (the one beside nvcc, CUDA_HOME's or /usr/local/cuda's)."""
    import os

    nvcc = find_nvcc()
    homes = [Path(nvcc).resolve().parents[1]] if nvcc else []
    homes += [Path(h) for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if h]
    homes.append(Path("/usr/local/cuda"))
    return next((h / "include" for h in homes if (h / "include" / "cuda_runtime.h").is_file()),
                None)


def program_cuda_names() -> set[str]:
    """The CUDA names in the code spans of program.md's CUDA section."""
    text = PROGRAM_MD.read_text()
    code = " ".join(re.findall(r"`([^`]+)`", text[text.index("## 11. CUDA C++"):]))
    return {re.split(r"::\s*", name)[-1] for name in CUDA_NAME.findall(code)}


@pytest.mark.skipif(cuda_include_dir() is None, reason="CUDA headers not found")
def test_every_cuda_name_in_program_md_is_in_the_cuda_headers() -> None:
    names = program_cuda_names()
    assert {"__shfl_xor_sync", "mma_sync", "cudaFuncSetAttribute", "__pipeline_memcpy_async",
            "cuTensorMapEncodeTiled", "cp_async_bulk_tensor_2d_global_to_shared"} <= names
    include = cuda_include_dir()
    assert include is not None
    pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names))) + r")\b")
    found: set[str] = set()
    for path in include.rglob("*"):
        if path.is_file() and path.suffix in ("", ".h", ".hpp", ".cuh"):
            found.update(pattern.findall(path.read_text(errors="replace")))
    assert names - found == set(), f"program.md names CUDA APIs absent from {include}"


# -- on a GPU --------------------------------------------------------------------------------------

GPU_CASES = {
    "reduce": [((7, 33), {}), ((4, 4097), {}), ((3, 300, 5), {"axis": 1}), ((65537, 1), {}),
               ((5, 3001), {"axis": -1, "op": "amax"}), ((3, 300, 5), {"axis": 1, "op": "mean"})],
    "softmax": [((7, 33), {}), ((2, 20000), {}), ((2, 8, 33), {"axis": 1}), ((1537, 1), {})],
    "rmsnorm": [((7, 33), {}), ((5, 4097), {}), ((2, 1537, 3), {"axis": 1}), ((33, 1), {})],
    "gelu": [((7, 33), {}), ((3, 1537), {"approximate": "tanh"}), ((1, 1), {})],
}


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", sorted(GPU_CASES))
def test_cuda_starter_matches_reference_on_gpu(kernel_type: str) -> None:
    """Every dtype, odd widths (vector tails), a non-last axis, and an unaligned view."""
    import importlib.util

    import torch

    from autokernel.ops import get_spec

    reference = get_spec(kernel_type).reference
    path = CUDA_STARTERS_DIR / f"{kernel_type}.py"
    spec = importlib.util.spec_from_file_location(f"cuda_gpu_{kernel_type}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tolerance = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}
    for dtype, tol in tolerance.items():
        for shape, params in GPU_CASES[kernel_type]:
            x = torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)
            args: list[object] = [x]
            if kernel_type == "rmsnorm":
                args += [torch.randn(shape[params.get("axis", -1)], device="cuda").to(dtype), 1e-6]
            args += list(params.values())
            expected = reference(*args)
            got = module.kernel_fn(*args)
            torch.cuda.synchronize()
            torch.testing.assert_close(got, expected, atol=tol, rtol=tol)
        unaligned = torch.randn(4 * 1000 + 1, device="cuda").to(dtype)[1:].view(4, 1000)
        args = [unaligned] + ([torch.ones(1000, device="cuda", dtype=dtype), 1e-6]
                              if kernel_type == "rmsnorm" else [])
        torch.testing.assert_close(module.kernel_fn(*args), reference(*args),
                                   atol=tol, rtol=tol)


# Registry-driven cases for the starters that take the op's own inputs: odd shapes (vector
# tails, ragged tiles, K = 1, batch broadcast) and every adversarial input, in every dtype.
REGISTRY_CASES: dict[str, list[tuple[tuple[int, ...], dict[str, object]]]] = {
    "layernorm": [((7, 33), {}), ((5, 4097), {}), ((1, 1), {}), ((3, 1536), {})],
    "cross_entropy": [((7, 33), {}), ((5, 4097), {}), ((4, 1), {}), ((3, 32000), {})],
    "rotary_embedding": [((1, 1, 1, 2), {}), ((2, 3, 33, 80), {}), ((1, 2, 17, 128), {}),
                         ((2, 1, 5, 72), {})],
    "matmul": [((1, 1, 1, 1), {}), ((1, 33, 65, 17), {}), ((3, 130, 129, 70), {}),
               ((1, 64, 48, 1), {}), ((1, 95, 93, 91), {"b_transposed": True}),
               ((2, 257, 1, 33), {})],
    # (M, D, H): D = 1 and H = 1 (a one-wide K or N), odd widths past the vector chunks.
    "fused_mlp": [((1, 1, 1), {}), ((33, 48, 80), {}), ((63, 65, 67), {}), ((1, 64, 96), {}),
                  ((130, 1, 40), {}), ((64, 256, 1), {}), ((257, 96, 136), {})],
    # (B, H, S, D): S = 1 and ragged S, D = 80 (padded to 96), the widest resident D (256) and
    # the wide heads whose tiles the launcher shrinks (320 ... 1024), causal or not, explicit scale.
    "flash_attention": [((1, 1, 1, 32), {}), ((2, 3, 37, 64), {}),
                        ((1, 2, 64, 128), {"causal": False}), ((1, 1, 50, 80), {"scale": 0.3}),
                        ((2, 2, 33, 96), {"causal": False}), ((1, 2, 130, 256), {}),
                        ((1, 2, 40, 320), {}), ((1, 1, 24, 512), {"causal": False}),
                        ((2, 1, 19, 768), {}), ((1, 1, 33, 1024), {})],
}


def _load_cuda_starter(kernel_type: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"cuda_gpu_registry_{kernel_type}",
                                                  CUDA_STARTERS_DIR / f"{kernel_type}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", sorted(REGISTRY_CASES))
def test_cuda_registry_starter_matches_reference_on_gpu(kernel_type: str) -> None:
    import torch

    from autokernel.ops import get_spec

    op = get_spec(kernel_type)
    module = _load_cuda_starter(kernel_type)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for dtype in op.dtypes:
        tol = op.tolerance(dtype)
        makers = [(shape, params, op.make_inputs) for shape, params in REGISTRY_CASES[kernel_type]]
        makers += [(REGISTRY_CASES[kernel_type][1][0], {}, case.make_inputs)
                   for case in op.adversarial]
        for shape, params, make in makers:
            inputs = make(shape, dtype, "cuda", generator, **params)
            expected = op.reference(*inputs)
            got = module.kernel_fn(*inputs)  # type: ignore[attr-defined]
            torch.cuda.synchronize()
            assert got.dtype == expected.dtype and got.shape == expected.shape
            torch.testing.assert_close(got, expected, atol=tol.atol, rtol=tol.rtol, equal_nan=True,
                                       msg=lambda m: f"{kernel_type} {shape} {dtype}: {m}")


@pytest.mark.gpu
def test_cuda_matmul_batch_broadcast_and_cross_entropy_ignore_on_gpu() -> None:
    import torch

    from autokernel import reference

    matmul = _load_cuda_starter("matmul")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.randn(2, 3, 17, 40, device="cuda").to(dtype)
        b = (torch.randn(40, 23, device="cuda") / 40 ** 0.5).to(dtype)  # broadcast over [2, 3]
        torch.testing.assert_close(matmul.kernel_fn(a, b), reference.matmul(a, b),  # type: ignore
                                   atol=2e-2 if dtype != torch.float32 else 1e-4,
                                   rtol=2e-2 if dtype != torch.float32 else 1e-4)
    cross_entropy = _load_cuda_starter("cross_entropy")
    logits = torch.randn(9, 1537, device="cuda")
    targets = torch.full((9,), -100, device="cuda", dtype=torch.int64)
    assert cross_entropy.kernel_fn(logits, targets).isnan()  # type: ignore[attr-defined]
    targets[3] = 1536
    torch.testing.assert_close(cross_entropy.kernel_fn(logits, targets),  # type: ignore
                               reference.cross_entropy(logits, targets))


@pytest.mark.gpu
@pytest.mark.parametrize("path", CUDA_STARTERS, ids=lambda p: p.stem)
def test_cuda_starter_passes_the_harness_on_gpu(path: Path, tmp_path: Path) -> None:
    """The whole sandboxed path: built by the runner, loaded before the sandbox, every stage,
    launches counted, ghost replay, in every dtype of its op."""
    from autokernel.harness.runner import run_bench
    from autokernel.ops import get_spec

    info = read_kernel_file(path)
    dtypes = list(get_spec(info.kernel_type).dtypes)
    result = run_bench(path, device="cuda", cache_dir=tmp_path, timeout_s=540, quick=True,
                       dtypes=dtypes)
    assert result.status is Status.PASS, f"{result.stage}: {result.reason}"
    assert result.stages.get("build") == "pass" and "build" in result.phase_seconds
