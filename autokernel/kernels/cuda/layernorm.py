"""LayerNorm over the last dim of x, in CUDA C++: y = (x - mean) / sqrt(var + eps) * weight + bias
(biased variance; x viewed as [M, N] rows, weight and bias [N], y contiguous).

Algorithm: one block of BLOCK_THREADS threads per row, rows walked grid-stride. Statistics are
float32 on values shifted by the row's first element (s = x - x[row, 0]), as the reference does:
a row of 1e4 + noise keeps small numbers, and a constant row gives exactly zero deviations
(y = bias). Three passes over the row: the sum of s (mean), the sum of (s - mean)² (an exact
two-pass variance, no E[x²] - E[x]² cancellation), then y written once, rounded to x's dtype.
Each block-wide sum is a warp-shuffle reduction plus one shared-memory step. Rows with unit
column stride whose x row, y row, weight and bias are 16-byte aligned use 16-byte vector loads
and stores (4 fp32 or 8 fp16/bf16 elements) with a scalar tail.

Limits: x is read three times per row (the second and third reads usually hit L1/L2, not
DRAM); a row is one block, so many short rows leave threads idle. weight and bias are cast to
x's dtype (the registry gives them so). Every load and store is bounds-checked; fp32, fp16 and
bf16; int64 indexing throughout.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "layernorm"
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
    __syncthreads();  // warp_sums and total are reused by the next call
    return result;
}

template <typename T>
__global__ void __launch_bounds__(BLOCK_THREADS) layernorm_rows(
        const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
        T* __restrict__ y, int64_t n_rows, int64_t n, int64_t stride_m, int64_t stride_n,
        float eps) {
    constexpr int VEC = 16 / sizeof(T);
    const bool params_aligned = reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                                reinterpret_cast<uintptr_t>(bias) % 16 == 0;
    for (int64_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const T* row_x = x + row * stride_m;
        T* row_y = y + row * n;  // y is contiguous [n_rows, n]
        const bool vector_ok = VECTORIZE && stride_n == 1 && params_aligned &&
                               reinterpret_cast<uintptr_t>(row_x) % 16 == 0 &&
                               reinterpret_cast<uintptr_t>(row_y) % 16 == 0;
        const int64_t n_vec = vector_ok ? n / VEC : 0;  // chunk c: elements [c*VEC, c*VEC+VEC)
        const int64_t tail = n_vec * VEC;
        const float shift = to_float(row_x[0]);  // n >= 1 (the launcher returns early on 0)

        float sum = 0.0f;  // pass 1: the mean of the shifted row
        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) sum += to_float(values[i]) - shift;
        }
        for (int64_t j = tail + threadIdx.x; j < n; j += BLOCK_THREADS)
            sum += to_float(row_x[j * stride_n]) - shift;
        const float mean = block_sum(sum) / static_cast<float>(n);

        float sum_sq = 0.0f;  // pass 2: squared deviations from that mean
        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const float d = (to_float(values[i]) - shift) - mean;
                sum_sq += d * d;
            }
        }
        for (int64_t j = tail + threadIdx.x; j < n; j += BLOCK_THREADS) {
            const float d = (to_float(row_x[j * stride_n]) - shift) - mean;
            sum_sq += d * d;
        }
        const float rstd = rsqrtf(block_sum(sum_sq) / static_cast<float>(n) + eps);

        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {  // pass 3: y
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const uint4 raw_w = reinterpret_cast<const uint4*>(weight)[c];
            const uint4 raw_b = reinterpret_cast<const uint4*>(bias)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
            const T* gains = reinterpret_cast<const T*>(&raw_w);
            const T* offsets = reinterpret_cast<const T*>(&raw_b);
            uint4 packed;
            T* outs = reinterpret_cast<T*>(&packed);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const float d = (to_float(values[i]) - shift) - mean;
                outs[i] = from_float<T>(d * rstd * to_float(gains[i]) + to_float(offsets[i]));
            }
            reinterpret_cast<uint4*>(row_y)[c] = packed;
        }
        for (int64_t j = tail + threadIdx.x; j < n; j += BLOCK_THREADS) {
            const float d = (to_float(row_x[j * stride_n]) - shift) - mean;
            row_y[j] = from_float<T>(d * rstd * to_float(weight[j]) + to_float(bias[j]));
        }
    }
}

template <typename T>
static int launch(const void* x, const void* weight, const void* bias, void* y, int64_t n_rows,
                  int64_t n, int64_t stride_m, int64_t stride_n, double eps,
                  cudaStream_t stream) {
    const unsigned blocks = static_cast<unsigned>(n_rows < (1 << 20) ? n_rows : (1 << 20));
    layernorm_rows<T><<<blocks, BLOCK_THREADS, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<T*>(y), n_rows, n, stride_m, stride_n, static_cast<float>(eps));
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (x, weight, bias and y alike). weight and bias are contiguous
// [n]; y is contiguous [n_rows, n]; x's element (r, j) is at r * stride_m + j * stride_n.
extern "C" int layernorm_launch(const void* x, const void* weight, const void* bias, void* y,
                                int64_t n_rows, int64_t n, int64_t stride_m, int64_t stride_n,
                                double eps, int64_t dtype, cudaStream_t stream) {
    if (n_rows < 0 || n < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (n_rows == 0 || n == 0) return 0;  // empty: nothing to launch
#define ARGS x, weight, bias, y, n_rows, n, stride_m, stride_n, eps, stream
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


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              eps: float = 1e-5) -> torch.Tensor:
    if x.ndim == 0:
        raise ValueError("layernorm needs at least one dim")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"layernorm supports fp32, fp16 and bf16, not {x.dtype}")
    n = x.shape[-1]
    if weight.shape != (n,) or bias.shape != (n,):
        raise ValueError(f"weight and bias must have shape ({n},), got {tuple(weight.shape)} "
                         f"and {tuple(bias.shape)}")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    rows = x.reshape(-1, n)  # a view unless x's strides forbid one
    gain = weight.to(x.dtype).contiguous()
    offset = bias.to(x.dtype).contiguous()
    EXTENSION.launch("layernorm_launch", rows, gain, offset, y, rows.shape[0], n, *rows.stride(),
                     float(eps), DTYPE_CODES[x.dtype])
    return y
