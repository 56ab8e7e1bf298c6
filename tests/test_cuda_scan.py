"""The static scan's rules for CUDA C++ (autokernel.cuda.scan): one bad source per rule, the
escapes that would hide a name, and what an honest kernel keeps (comments, strings, intrinsics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.cuda.scan import CUDA_RULES, scan_cuda_source
from autokernel.harness.scan_rules import RULES
from autokernel.harness.static_scan import scan_source

REDUCE = (Path(__file__).resolve().parents[1] / "autokernel" / "kernels" / "cuda" / "reduce.py")

BAD_SOURCES = {
    "import-not-allowed": ["#include <torch/extension.h>", "#include <cutlass/gemm.h>",
                           '#include "cub/cub.cuh"', "#include <cstdlib>"],
    "library-fallback": ["auto y = at::matmul(a, b);", "torch::softmax(x, -1);",
                         "cublasSgemm(handle, 0, 0, m, n, k, 0, 0, m, 0, k, 0, 0, m);",
                         "cudnnCreate(&h);", "cudaGraphLaunch(g, s);", "cub::DeviceReduce::Sum();"],
    "module-escape": ['system("nvidia-smi");', 'FILE* p = popen("ls", "r");', "fork();",
                      'dlopen("libcublas.so", 1);', 'const char* v = getenv("HOME");',
                      'execvp("sh", argv);', "__attribute__((constructor)) void f() {}"],
    "file-access": ['fopen("/tmp/out", "w");', 'std::ofstream out("/tmp/x");', 'unlink("x");',
                    'int fd = open("/etc/passwd", 0);'],
    "thread": ["std::thread t(work);", "pthread_create(&t, 0, work, 0);"],
    "side-stream": ["cudaStreamCreate(&side);", "cudaSetDevice(1);",
                    "cudaLaunchHostFunc(s, f, 0);", "k<<<1, 1, 0, cudaStreamPerThread>>>();"],
    "host-memory": ["cudaMalloc(&p, 4);", "cudaMemcpy(h, d, 4, cudaMemcpyDeviceToHost);",
                    "cudaMemsetAsync(p, 0, 4, s);", "cudaFree(p);"],
    "inline-asm": ['asm volatile("call.uni helper, (%0);" :: "l"(p));',
                   'asm("trap;");', '__asm__ __volatile__("syscall");', 'asm(".extern .func f;");'],
    "preprocessor-escape": ["#define CALL(a, b) a##b", "#include HEADER", "void s\\u0079stem();",
                            '#pragma comment(lib, "cublas")', '#line 1 "other.cu"'],
}


@pytest.mark.parametrize("rule,line", [(rule, line) for rule, lines in BAD_SOURCES.items()
                                       for line in lines])
def test_each_rule_fires(rule: str, line: str) -> None:
    violations = scan_cuda_source("#include <stdint.h>\n" + line + "\n")
    assert rule in {v.rule for v in violations}, violations
    assert all(v.line == 2 for v in violations if v.rule == rule)


def test_every_cuda_rule_is_in_the_contract() -> None:
    assert set(CUDA_RULES) <= set(RULES) and set(BAD_SOURCES) == set(CUDA_RULES)


def test_names_split_by_a_line_continuation_are_seen() -> None:
    assert [v.rule for v in scan_cuda_source('void f() { sys\\\ntem("ls"); }')] == ["module-escape"]


def test_honest_text_passes() -> None:
    honest = """
#include <cuda_fp16.h>
#include <mma.h>
// calls system() and fopen() nowhere: comments are not code
/* cudaMalloc is not used either */
__device__ int lane() { int id; asm volatile("mov.u32 %0, %%laneid;" : "=r"(id)); return id; }
__global__ void k(float* y) {
#pragma unroll
    for (int i = 0; i < 4; ++i) y[i] = 0.0f;
    printf("opened %s\\n", "fopen(");
}
"""
    assert scan_cuda_source(honest) == []


def test_lines_point_into_kernel_py_and_the_python_scan_still_runs() -> None:
    source = REDUCE.read_text()
    bad = source.replace("#include <stdint.h>", "#include <stdlib.h>").replace(
        "import math\n", "import math\nimport os\n")
    line = bad.splitlines().index("#include <stdlib.h>") + 1
    found = {(v.rule, v.line) for v in scan_source(bad)}
    assert ("import-not-allowed", line) in found
    assert any(rule == "import-not-allowed" and n < line for rule, n in found)  # import os


def test_only_cuda_files_may_import_the_runtime() -> None:
    source = REDUCE.read_text()
    assert scan_source(source) == []
    as_triton = source.replace('BACKEND = "cuda"', 'BACKEND = "triton"')
    assert "import-not-allowed" in {v.rule for v in scan_source(as_triton)}
    other = source.replace("from autokernel.cuda.runtime import load_extension",
                           "from autokernel.cuda.build import build_extension")
    assert "import-not-allowed" in {v.rule for v in scan_source(other)}


@pytest.mark.parametrize("statement", [
    "from autokernel.cuda.runtime import use_prebuilt",  # would register its own library
    "from autokernel.cuda.runtime import Extension",  # would replace the monitored launch
    "from autokernel.cuda.runtime import load_extension, forbid_builds",
    "import autokernel.cuda.runtime",
])
def test_a_cuda_file_imports_only_load_extension_from_the_runtime(statement: str) -> None:
    source = REDUCE.read_text().replace("from autokernel.cuda.runtime import load_extension",
                                        f"from autokernel.cuda.runtime import load_extension\n"
                                        f"{statement}")
    assert "import-not-allowed" in {v.rule for v in scan_source(source)}
