"""Softmax over one dim of x, in CUDA C++ (x viewed as [outer, N, inner], y contiguous).

Algorithm: one block of BLOCK_THREADS threads per row of N elements, rows walked grid-stride.
Pass 1 keeps each thread's running (max, sum of exp(x - max)) in float32 (online softmax, one read
of x), merged across the block with warp shuffles; pass 2 re-reads x (often from L2) and writes
exp(x - max) / sum, rounded to x's dtype once. Contiguous rows (inner == 1, unit stride, 16-byte
aligned x and y rows) use 16-byte vector loads and stores with a scalar tail.

Limits: a row is one block, so many short rows leave threads idle; over a non-last dim
(inner > 1) loads and stores are strided (uncoalesced). A row of only -inf gives NaN, like torch.
Every load and store is bounds-checked; fp32, fp16 and bf16.
"""

import math

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "softmax"
BACKEND = "cuda"

BLOCK_THREADS = 256
VECTORIZE = True
TUNABLE_SPACE = {"BLOCK_THREADS": [64, 128, 256, 512, 1024], "VECTORIZE": [True, False]}

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

// The block's total of each thread's `value`, returned to every thread.
__device__ float block_sum(float value) {
    __shared__ float warp_sums[BLOCK_THREADS / 32];
    __shared__ float total;
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = lane < BLOCK_THREADS / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1)
            value += __shfl_xor_sync(0xffffffffu, value, offset);
        if (lane == 0) total = value;
    }
    __syncthreads();
    const float result = total;
    __syncthreads();  // warp_sums and total are reused by the next row
    return result;
}

// The block's maximum of each thread's `value`, returned to every thread.
__device__ float block_max(float value) {
    __shared__ float warp_maxes[BLOCK_THREADS / 32];
    __shared__ float total;
    for (int offset = 16; offset > 0; offset >>= 1)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_maxes[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = lane < BLOCK_THREADS / 32 ? warp_maxes[lane] : -INFINITY;
        for (int offset = 16; offset > 0; offset >>= 1)
            value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
        if (lane == 0) total = value;
    }
    __syncthreads();
    const float result = total;
    __syncthreads();
    return result;
}

// Folds x into a running (max, sum of exp(x - max)); -inf maxima contribute nothing.
__device__ __forceinline__ void online_add(float& max, float& sum, float x) {
    if (x > max) {
        sum = (max == -INFINITY ? 0.0f : sum * expf(max - x)) + 1.0f;
        max = x;
    } else if (x != -INFINITY || max != -INFINITY) {
        sum += expf(x - max);
    }
}

template <typename T>
__global__ void __launch_bounds__(BLOCK_THREADS) softmax_rows(
        const T* __restrict__ x, T* __restrict__ y, int64_t n_rows, int64_t n, int64_t inner,
        int64_t stride_o, int64_t stride_n, int64_t stride_k) {
    constexpr int VEC = 16 / sizeof(T);
    for (int64_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const int64_t o = row / inner, k = row % inner;
        const T* row_x = x + o * stride_o + k * stride_k;
        T* row_y = y + o * n * inner + k;  // y is contiguous [outer, n, inner]
        const bool vector_ok = VECTORIZE && stride_n == 1 && inner == 1 &&
                               reinterpret_cast<uintptr_t>(row_x) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(row_y) % 16 == 0;
        const int64_t n_vec = vector_ok ? n / VEC : 0;  // chunk c: elements [c*VEC, c*VEC+VEC)
        // Pass 1: each thread's running max and sum, then the block's.
        float max = -INFINITY, sum = 0.0f;
        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) online_add(max, sum, to_float(values[i]));
        }
        for (int64_t j = n_vec * VEC + threadIdx.x; j < n; j += BLOCK_THREADS)
            online_add(max, sum, to_float(row_x[j * stride_n]));
        const float row_max = block_max(max);
        const float row_sum = block_sum(max == -INFINITY ? 0.0f : sum * expf(max - row_max));
        const float inv_sum = 1.0f / row_sum;
        // Pass 2: write exp(x - max) / sum.
        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
            uint4 packed;
            T* outs = reinterpret_cast<T*>(&packed);
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                outs[i] = from_float<T>(expf(to_float(values[i]) - row_max) * inv_sum);
            reinterpret_cast<uint4*>(row_y)[c] = packed;
        }
        for (int64_t j = n_vec * VEC + threadIdx.x; j < n; j += BLOCK_THREADS)
            row_y[j * inner] = from_float<T>(expf(to_float(row_x[j * stride_n]) - row_max) *
                                             inv_sum);
    }
}

template <typename T>
static int launch(const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                  int64_t stride_o, int64_t stride_n, int64_t stride_k, cudaStream_t stream) {
    const int64_t n_rows = outer * inner;
    const unsigned blocks = static_cast<unsigned>(n_rows < (1 << 20) ? n_rows : (1 << 20));
    softmax_rows<T><<<blocks, BLOCK_THREADS, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n_rows, n, inner, stride_o, stride_n,
        stride_k);
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16. y is contiguous [outer, n, inner].
extern "C" int softmax_launch(const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                              int64_t stride_o, int64_t stride_n, int64_t stride_k,
                              int64_t dtype, cudaStream_t stream) {
    if (outer < 0 || n < 0 || inner < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (outer == 0 || n == 0 || inner == 0) return 0;  // empty: nothing to launch
#define ARGS x, y, outer, n, inner, stride_o, stride_n, stride_k, stream
    switch (dtype) {
        case 0: return launch<float>(ARGS);
        case 1: return launch<__half>(ARGS);
        case 2: return launch<__nv_bfloat16>(ARGS);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
#undef ARGS
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS, "VECTORIZE": VECTORIZE})


def kernel_fn(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for {x.ndim} dims")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"softmax supports fp32, fp16 and bf16, not {x.dtype}")
    axis %= x.ndim
    shape = tuple(x.shape)
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    view = x.reshape(outer, n, inner)  # a view unless x's strides forbid one
    EXTENSION.launch("softmax_launch", view, y, outer, n, inner, *view.stride(),
                     DTYPE_CODES[x.dtype])
    return y
