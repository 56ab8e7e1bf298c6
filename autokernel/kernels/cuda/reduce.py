"""Sum, mean or max over one dim of x, in CUDA C++: out[o, k] = op_j x[o, j, k] (x viewed as
[outer, N, inner]); `op` is "sum" (the default), "mean" (the float32 sum divided by N before the
cast, as torch.mean) or "amax" (the largest element; NaN where the row holds one, as torch.amax).

Algorithm: one block of BLOCK_THREADS threads per output element (a "row" of N elements), rows
walked grid-stride. Each thread accumulates its share in float32 whatever x's dtype; the block
combines the threads' values with warp shuffles and one shared-memory step. The op is a template
parameter (one kernel per op). For amax the combine is a max that keeps NaN: CUDA's fmaxf drops
it, torch.amax returns it. Contiguous rows (inner == 1, unit stride, 16-byte aligned start) are
read with 16-byte vector loads (4 fp32 or 8 fp16/bf16 elements) and a scalar tail; any other
layout takes strided scalar loads.

Limits: a row is one block, so many very short rows (N < BLOCK_THREADS) leave threads idle, and
a reduction over a non-last dim (inner > 1) reads N strided elements per row (uncoalesced).
Every load and store is bounds-checked; fp32, fp16 and bf16.
"""

import math

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "reduce"
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

// How a row's values combine: 0 sum, 1 mean (a sum, divided at the end), 2 amax.
template <int OP> struct Combine {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};
template <> struct Combine<2> {
    static __device__ __forceinline__ float identity() { return -INFINITY; }
    // fmaxf(NaN, b) is b; torch.amax answers NaN, so NaN wins here: a NaN a is kept by the
    // first test, a NaN b by the second (a > NaN is false).
    static __device__ __forceinline__ float apply(float a, float b) {
        return (a > b || a != a) ? a : b;
    }
};

// The block's combination of each thread's `value`, returned to every thread.
template <int OP>
__device__ float block_combine(float value) {
    __shared__ float warp_values[BLOCK_THREADS / 32];
    __shared__ float total;
    for (int offset = 16; offset > 0; offset >>= 1)
        value = Combine<OP>::apply(value, __shfl_xor_sync(0xffffffffu, value, offset));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_values[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = lane < BLOCK_THREADS / 32 ? warp_values[lane] : Combine<OP>::identity();
        for (int offset = 16; offset > 0; offset >>= 1)
            value = Combine<OP>::apply(value, __shfl_xor_sync(0xffffffffu, value, offset));
        if (lane == 0) total = value;
    }
    __syncthreads();
    const float result = total;
    __syncthreads();  // warp_values and total are reused by the next row
    return result;
}

template <typename T, int OP>
__global__ void __launch_bounds__(BLOCK_THREADS) reduce_rows(
        const T* __restrict__ x, T* __restrict__ out, int64_t n_rows, int64_t n, int64_t inner,
        int64_t stride_o, int64_t stride_n, int64_t stride_k) {
    constexpr int VEC = 16 / sizeof(T);
    for (int64_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const int64_t o = row / inner, k = row % inner;
        const T* row_x = x + o * stride_o + k * stride_k;
        float acc = Combine<OP>::identity();
        const bool vector_ok = VECTORIZE && stride_n == 1 &&
                               reinterpret_cast<uintptr_t>(row_x) % 16 == 0;
        int64_t tail_start = 0;
        if (vector_ok) {
            const int64_t n_vec = n / VEC;  // chunk c covers elements [c*VEC, c*VEC+VEC) < n
            const uint4* chunks = reinterpret_cast<const uint4*>(row_x);
            for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
                const uint4 raw = chunks[c];
                const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc = Combine<OP>::apply(acc, to_float(values[i]));
            }
            tail_start = n_vec * VEC;
        }
        for (int64_t j = tail_start + threadIdx.x; j < n; j += BLOCK_THREADS)
            acc = Combine<OP>::apply(acc, to_float(row_x[j * stride_n]));
        acc = block_combine<OP>(acc);
        if (OP == 1) acc = acc / static_cast<float>(n);
        if (threadIdx.x == 0) out[row] = from_float<T>(acc);  // row < n_rows: in bounds
    }
}

template <typename T, int OP>
static int launch(const void* x, void* out, int64_t outer, int64_t n, int64_t inner,
                  int64_t stride_o, int64_t stride_n, int64_t stride_k, cudaStream_t stream) {
    const int64_t n_rows = outer * inner;
    const unsigned blocks = static_cast<unsigned>(n_rows < (1 << 20) ? n_rows : (1 << 20));
    reduce_rows<T, OP><<<blocks, BLOCK_THREADS, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), n_rows, n, inner, stride_o, stride_n,
        stride_k);
    return static_cast<int>(cudaGetLastError());
}

template <typename T>
static int launch_op(int64_t op, const void* x, void* out, int64_t outer, int64_t n,
                     int64_t inner, int64_t stride_o, int64_t stride_n, int64_t stride_k,
                     cudaStream_t stream) {
#define ARGS x, out, outer, n, inner, stride_o, stride_n, stride_k, stream
    switch (op) {
        case 0: return launch<T, 0>(ARGS);
        case 1: return launch<T, 1>(ARGS);
        case 2: return launch<T, 2>(ARGS);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
#undef ARGS
}

// dtype: 0 fp32, 1 fp16, 2 bf16; op: 0 sum, 1 mean, 2 amax. out is contiguous [outer, inner].
extern "C" int reduce_launch(const void* x, void* out, int64_t outer, int64_t n, int64_t inner,
                             int64_t stride_o, int64_t stride_n, int64_t stride_k, int64_t dtype,
                             int64_t op, cudaStream_t stream) {
    if (outer < 0 || n < 0 || inner < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (outer == 0 || inner == 0) return 0;  // no output element: nothing to launch
#define ARGS op, x, out, outer, n, inner, stride_o, stride_n, stride_k, stream
    switch (dtype) {
        case 0: return launch_op<float>(ARGS);
        case 1: return launch_op<__half>(ARGS);
        case 2: return launch_op<__nv_bfloat16>(ARGS);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
#undef ARGS
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
OP_CODES = {"sum": 0, "mean": 1, "amax": 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS, "VECTORIZE": VECTORIZE})


def kernel_fn(x: torch.Tensor, axis: int = -1, op: str = "sum") -> torch.Tensor:
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for {x.ndim} dims")
    if op not in OP_CODES:
        raise ValueError(f"reduce op {op!r}: choose one of {', '.join(OP_CODES)}")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"reduce supports fp32, fp16 and bf16, not {x.dtype}")
    axis %= x.ndim
    shape = tuple(x.shape)
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    out = torch.empty(shape[:axis] + shape[axis + 1:], dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    view = x.reshape(outer, n, inner)  # a view unless x's strides forbid one
    if n == 0 and op == "amax":
        raise ValueError("amax over an empty dim has no identity (torch raises too)")
    EXTENSION.launch("reduce_launch", view, out, outer, n, inner, *view.stride(),
                     DTYPE_CODES[x.dtype], OP_CODES[op])
    return out
