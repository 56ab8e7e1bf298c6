"""GELU elementwise, in CUDA C++: y = x·Φ(x) (approximate="tanh": GPT-2's tanh form).

Algorithm: a grid-stride loop over 16-byte chunks (4 fp32 or 8 fp16/bf16 elements) when x and y
start 16-byte aligned (always, for the contiguous copies kernel_fn hands over from a fresh
allocation), then a scalar loop over the tail; math in float32, rounded to x's dtype once.
The grid is capped at MAX_BLOCKS blocks, each thread walking several chunks.

Limits: x is made contiguous first (a strided x is copied); tanh uses tanhf and the exact form
erff (accurate, not the fastest intrinsics). Every load and store is bounds-checked; fp32,
fp16 and bf16.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "gelu"
BACKEND = "cuda"

BLOCK_THREADS = 256
VECTORIZE = True
MAX_BLOCKS = 65536
TUNABLE_SPACE = {"BLOCK_THREADS": [128, 256, 512, 1024], "VECTORIZE": [True, False],
                 "MAX_BLOCKS": [1024, 4096, 65536]}

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VECTORIZE
#define VECTORIZE 1
#endif
#ifndef MAX_BLOCKS
#define MAX_BLOCKS 65536
#endif
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS: warps, <= 1024");

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float gelu(float x, bool tanh_form) {
    if (tanh_form) {
        const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));  // x * Phi(x)
}

// Thread t of the grid handles 16-byte chunks t, t + stride, ... (chunk c: elements
// [c*VEC, c*VEC+VEC) < n when vectorized), then scalar elements from the last whole chunk on.
template <typename T>
__global__ void __launch_bounds__(BLOCK_THREADS) gelu_elements(
        const T* __restrict__ x, T* __restrict__ y, int64_t n, bool vectorized, bool tanh_form) {
    constexpr int VEC = 16 / sizeof(T);
    const int64_t first = blockIdx.x * static_cast<int64_t>(BLOCK_THREADS) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * BLOCK_THREADS;
    const int64_t n_vec = vectorized ? n / VEC : 0;
    for (int64_t c = first; c < n_vec; c += stride) {
        const uint4 raw = reinterpret_cast<const uint4*>(x)[c];
        const T* values = reinterpret_cast<const T*>(&raw);
        uint4 packed;
        T* outs = reinterpret_cast<T*>(&packed);
#pragma unroll
        for (int i = 0; i < VEC; ++i) outs[i] = from_float<T>(gelu(to_float(values[i]), tanh_form));
        reinterpret_cast<uint4*>(y)[c] = packed;
    }
    for (int64_t j = n_vec * VEC + first; j < n; j += stride)
        y[j] = from_float<T>(gelu(to_float(x[j]), tanh_form));
}

template <typename T>
static int launch(const void* x, void* y, int64_t n, bool tanh_form, cudaStream_t stream) {
    const bool vectorized = VECTORIZE && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y) % 16 == 0;
    const int64_t work = vectorized ? n / (16 / sizeof(T)) + 16 : n;  // chunks, plus the tail
    int64_t blocks = (work + BLOCK_THREADS - 1) / BLOCK_THREADS;
    blocks = blocks < 1 ? 1 : (blocks > MAX_BLOCKS ? MAX_BLOCKS : blocks);
    gelu_elements<T><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, vectorized, tanh_form);
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16; approximate: 0 exact (erf), 1 tanh. x and y contiguous [n].
extern "C" int gelu_launch(const void* x, void* y, int64_t n, int64_t approximate, int64_t dtype,
                           cudaStream_t stream) {
    if (n < 0 || approximate < 0 || approximate > 1) return static_cast<int>(cudaErrorInvalidValue);
    if (n == 0) return 0;  // empty: nothing to launch
    switch (dtype) {
        case 0: return launch<float>(x, y, n, approximate == 1, stream);
        case 1: return launch<__half>(x, y, n, approximate == 1, stream);
        case 2: return launch<__nv_bfloat16>(x, y, n, approximate == 1, stream);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS, "VECTORIZE": VECTORIZE,
                                         "MAX_BLOCKS": MAX_BLOCKS})


def kernel_fn(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    if x.dtype not in DTYPE_CODES:
        raise NotImplementedError(f"dtype {x.dtype} is not supported")
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    EXTENSION.launch("gelu_launch", x, y, x.numel(), int(approximate == "tanh"),
                     DTYPE_CODES[x.dtype])
    return y
