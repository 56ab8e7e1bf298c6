"""The adversarial CUDA kernels of issue 15 (tests/adversarial/cuda/): the ones the C++ static scan
can see are REJECTED by it with the right rule (on the CPU, here); the rest pass the scan and
compile for sm_90a, and on a GPU must be non-PASS (GPU-marked tests below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.cuda.build import CudaBuildError, build_extension, find_nvcc
from autokernel.harness.result import Status
from autokernel.harness.static_scan import scan_source
from autokernel.kernelfile import cuda_defines, read_kernel_file

CUDA_ADVERSARIAL_DIR = Path(__file__).parent / "adversarial" / "cuda"

# file -> the rules the scan must report (the first of them is run_bench's verdict rule).
SCAN_CAUGHT: dict[str, tuple[str, ...]] = {
    "aten_fallback.py": ("import-not-allowed", "library-fallback"),
    "cublas_call.py": ("import-not-allowed", "library-fallback"),
    "side_stream.py": ("side-stream",),
    "system_call.py": ("module-escape",),
}
# file -> the non-PASS statuses a GPU harness may give (see each file's docstring).
GPU_CAUGHT: dict[str, tuple[Status, ...]] = {
    "oob_write.py": (Status.FAIL, Status.CRASH, Status.REJECTED),
    "half_written.py": (Status.FAIL,),
    "stale_cache.py": (Status.FAIL, Status.REJECTED),
    "hang.py": (Status.TIMEOUT, Status.CRASH),
}


def test_every_cuda_adversarial_file_has_an_expected_verdict() -> None:
    assert {p.name for p in CUDA_ADVERSARIAL_DIR.glob("*.py")} == set(SCAN_CAUGHT) | set(GPU_CAUGHT)
    for path in CUDA_ADVERSARIAL_DIR.glob("*.py"):
        text = path.read_text()
        assert text.startswith('"""CHEAT (') and "Expected:" in text, path.name
        assert read_kernel_file(path).backend == "cuda"


@pytest.mark.parametrize("name", sorted(SCAN_CAUGHT))
def test_the_scan_rejects_what_it_can_see(name: str, tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench

    expected = SCAN_CAUGHT[name]
    rules = {v.rule for v in scan_source((CUDA_ADVERSARIAL_DIR / name).read_text())}
    assert set(expected) <= rules, rules
    result = run_bench(CUDA_ADVERSARIAL_DIR / name, device="cpu", cache_dir=tmp_path)
    assert result.status is Status.REJECTED and result.rule == expected[0], result.reason
    assert result.stage == "static_scan"


@pytest.mark.parametrize("name", sorted(GPU_CAUGHT))
def test_the_rest_pass_the_scan(name: str) -> None:
    """Only a GPU can catch these: the scan must not be what stops them."""
    assert scan_source((CUDA_ADVERSARIAL_DIR / name).read_text()) == []


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (CUDA toolkit absent)")
def test_the_gpu_only_cheats_compile_for_sm90a(tmp_path: Path) -> None:
    """They must reach the GPU stage they are written for, not die at the build."""
    from concurrent.futures import ThreadPoolExecutor

    def build(name: str) -> str | None:
        info = read_kernel_file(CUDA_ADVERSARIAL_DIR / name)
        assert info.cuda_source is not None
        try:
            build_extension(info.cuda_source, cuda_defines(info.tunables), arch="sm_90a",
                            cache_dir=tmp_path, timeout_s=300)
        except CudaBuildError as exc:
            return f"{name}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = [e for e in pool.map(build, sorted(GPU_CAUGHT)) if e]
    assert not errors, errors


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SCAN_CAUGHT) + sorted(GPU_CAUGHT))
def test_cuda_cheats_are_not_pass_on_gpu(name: str, tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench

    result = run_bench(CUDA_ADVERSARIAL_DIR / name, device="cuda", cache_dir=tmp_path,
                       timeout_s=120, quick=True)
    assert result.status is not Status.PASS, result.reason
    if name in SCAN_CAUGHT:
        assert result.status is Status.REJECTED and result.rule == SCAN_CAUGHT[name][0]
        return
    assert result.status in GPU_CAUGHT[name], result.reason
