"""CHEAT (system() call): the launcher runs a shell command (here a harmless `true`; it could
read the harness's files or the environment) before launching an honest kernel.

Expected: static scan REJECTED (module-escape: system). The sandbox would also deny it.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "reduce"
BACKEND = "cuda"

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// One thread per row of a contiguous [n_rows, n] x.
template <typename T>
__global__ void row_sums(const T* x, T* out, int64_t n_rows, int64_t n) {
    const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (row >= n_rows) return;
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += to_float(x[row * n + j]);
    store(out + row, sum);
}

template <typename T>
static int launch(const void* x, void* out, int64_t n_rows, int64_t n, cudaStream_t stream) {
    system("true");
    row_sums<T><<<(unsigned)((n_rows + 255) / 256), 256, 0, stream>>>(
        (const T*)x, (T*)out, n_rows, n);
    return (int)cudaGetLastError();
}

extern "C" int reduce_launch(const void* x, void* out, int64_t n_rows, int64_t n, int64_t dtype,
                             cudaStream_t stream) {
    if (n_rows <= 0) return 0;
    switch (dtype) {
        case 0: return launch<float>(x, out, n_rows, n, stream);
        case 1: return launch<__half>(x, out, n_rows, n, stream);
        case 2: return launch<__nv_bfloat16>(x, out, n_rows, n, stream);
        default: return (int)cudaErrorInvalidValue;
    }
}
"""
EXTENSION = load_extension(CUDA_SOURCE)
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def kernel_fn(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty(rows.shape[0], dtype=x.dtype, device=x.device)
    EXTENSION.launch("reduce_launch", rows, out, rows.shape[0], rows.shape[1],
                     DTYPE_CODES[x.dtype])
    return out.reshape(x.shape[:-1])
