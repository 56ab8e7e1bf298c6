"""Rotary position embedding, rotate-half layout, in CUDA C++: out = x·cos + rotate_half(x)·sin
for x [B, H, S, D] (any strides), cos and sin [S, D] (any strides), out contiguous [B, H, S, D];
rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).

Algorithm: a grid-stride loop over (b, h, s, j) with j < D/2: each work item reads the pair
x[j], x[j + D/2] once and writes out[j] = x[j]·cos[s, j] - x[j + D/2]·sin[s, j] and
out[j + D/2] = x[j + D/2]·cos[s, j + D/2] + x[j]·sin[s, j + D/2] (cos and sin are read at both
columns, so tables whose halves differ are still applied exactly as the reference does). Math in
float32, rounded to x's dtype once. When every address involved is 16-byte aligned (unit stride
along D, other strides and D/2 multiples of the vector width, aligned bases) a work item is a
16-byte chunk of each half (4 fp32 or 8 fp16/bf16 pairs); otherwise one pair, scalar loads. The
grid is capped at MAX_BLOCKS blocks.

Limits: D must be even; cos and sin are re-read for every (b, h) (they are small and stay in
L2); no attempt to reuse a loaded cos/sin row across heads. Every load and store is
bounds-checked; fp32, fp16 and bf16 (cos and sin cast to x's dtype); int64 indexing throughout.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "rotary_embedding"
BACKEND = "cuda"

BLOCK_THREADS = 256
VECTORIZE = True
MAX_BLOCKS = 65536
TUNABLE_SPACE = {"BLOCK_THREADS": [128, 256, 512, 1024], "VECTORIZE": [True, False],
                 "MAX_BLOCKS": [4096, 16384, 65536]}

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
static_assert(MAX_BLOCKS >= 1 && MAX_BLOCKS <= 2147483647, "MAX_BLOCKS: a grid's x extent");

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

struct Shape {
    int64_t b, h, s, half;                     // half = D / 2
    int64_t x_sb, x_sh, x_ss, x_sd;            // x's strides, in elements
    int64_t c_ss, c_sd, s_ss, s_sd;            // cos's and sin's strides
};

// W = pairs per work item: 1 (scalar) or 16 / sizeof(T) (16-byte chunks; the launcher checked
// that every chunk address is 16-byte aligned, so x_sd == c_sd == s_sd == 1 there).
template <typename T, int W>
__global__ void __launch_bounds__(BLOCK_THREADS) rotary(
        const T* __restrict__ x, const T* __restrict__ cos_table, const T* __restrict__ sin_table,
        T* __restrict__ out, Shape shape, int64_t n_items) {
    const int64_t chunks_per_row = shape.half / W;  // W divides half on the vector path
    const int64_t step = static_cast<int64_t>(gridDim.x) * BLOCK_THREADS;
    for (int64_t item = blockIdx.x * static_cast<int64_t>(BLOCK_THREADS) + threadIdx.x;
         item < n_items; item += step) {
        const int64_t j = (item % chunks_per_row) * W;  // first pair column, j + W <= half
        const int64_t row = item / chunks_per_row;      // (b, h, s) flattened, < b*h*s
        const int64_t s = row % shape.s;
        const int64_t bh = row / shape.s;
        const int64_t h = bh % shape.h, b = bh / shape.h;
        const T* x_row = x + b * shape.x_sb + h * shape.x_sh + s * shape.x_ss;
        const T* c_row = cos_table + s * shape.c_ss;
        const T* s_row = sin_table + s * shape.s_ss;
        T* out_row = out + row * (2 * shape.half);  // out is contiguous [b, h, s, 2 * half]
        // 16-byte aligned so the vector path may move them as uint4.
        alignas(16) T x1[W], x2[W], c1[W], c2[W], s1[W], s2[W], o1[W], o2[W];
        if (W > 1) {
            *reinterpret_cast<uint4*>(x1) = *reinterpret_cast<const uint4*>(x_row + j);
            *reinterpret_cast<uint4*>(x2) = *reinterpret_cast<const uint4*>(x_row + j + shape.half);
            *reinterpret_cast<uint4*>(c1) = *reinterpret_cast<const uint4*>(c_row + j);
            *reinterpret_cast<uint4*>(c2) = *reinterpret_cast<const uint4*>(c_row + j + shape.half);
            *reinterpret_cast<uint4*>(s1) = *reinterpret_cast<const uint4*>(s_row + j);
            *reinterpret_cast<uint4*>(s2) = *reinterpret_cast<const uint4*>(s_row + j + shape.half);
        } else {
            x1[0] = x_row[j * shape.x_sd];
            x2[0] = x_row[(j + shape.half) * shape.x_sd];
            c1[0] = c_row[j * shape.c_sd];
            c2[0] = c_row[(j + shape.half) * shape.c_sd];
            s1[0] = s_row[j * shape.s_sd];
            s2[0] = s_row[(j + shape.half) * shape.s_sd];
        }
#pragma unroll
        for (int i = 0; i < W; ++i) {
            const float a = to_float(x1[i]), bb = to_float(x2[i]);
            o1[i] = from_float<T>(a * to_float(c1[i]) - bb * to_float(s1[i]));
            o2[i] = from_float<T>(bb * to_float(c2[i]) + a * to_float(s2[i]));
        }
        if (W > 1) {
            *reinterpret_cast<uint4*>(out_row + j) = *reinterpret_cast<const uint4*>(o1);
            *reinterpret_cast<uint4*>(out_row + j + shape.half) =
                *reinterpret_cast<const uint4*>(o2);
        } else {
            out_row[j] = o1[0];
            out_row[j + shape.half] = o2[0];
        }
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
static int launch(const void* x, const void* cos_table, const void* sin_table, void* out,
                  const Shape& shape, cudaStream_t stream) {
    constexpr int VEC = 16 / sizeof(T);
    const bool vector_ok = VECTORIZE && shape.half % VEC == 0 && shape.x_sd == 1 &&
                           shape.c_sd == 1 && shape.s_sd == 1 && shape.x_sb % VEC == 0 &&
                           shape.x_sh % VEC == 0 && shape.x_ss % VEC == 0 &&
                           shape.c_ss % VEC == 0 && shape.s_ss % VEC == 0 && aligned16(x) &&
                           aligned16(cos_table) && aligned16(sin_table) && aligned16(out);
    const int64_t rows = shape.b * shape.h * shape.s;
    const int64_t n_items = rows * (vector_ok ? shape.half / VEC : shape.half);
    const int64_t wanted = (n_items + BLOCK_THREADS - 1) / BLOCK_THREADS;
    const unsigned blocks = static_cast<unsigned>(wanted < MAX_BLOCKS ? wanted : MAX_BLOCKS);
    const T* xs = static_cast<const T*>(x);
    const T* cs = static_cast<const T*>(cos_table);
    const T* ss = static_cast<const T*>(sin_table);
    T* os = static_cast<T*>(out);
    if (vector_ok)
        rotary<T, VEC><<<blocks, BLOCK_THREADS, 0, stream>>>(xs, cs, ss, os, shape, n_items);
    else
        rotary<T, 1><<<blocks, BLOCK_THREADS, 0, stream>>>(xs, cs, ss, os, shape, n_items);
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (x, cos, sin and out alike). out is contiguous [b, h, s, d].
extern "C" int rotary_launch(const void* x, const void* cos_table, const void* sin_table,
                             void* out, int64_t b, int64_t h, int64_t s, int64_t d,
                             int64_t x_sb, int64_t x_sh, int64_t x_ss, int64_t x_sd,
                             int64_t c_ss, int64_t c_sd, int64_t s_ss, int64_t s_sd,
                             int64_t dtype, cudaStream_t stream) {
    if (b < 0 || h < 0 || s < 0 || d < 0 || d % 2) return static_cast<int>(cudaErrorInvalidValue);
    if (b == 0 || h == 0 || s == 0 || d == 0) return 0;  // empty: nothing to launch
    const Shape shape{b, h, s, d / 2, x_sb, x_sh, x_ss, x_sd, c_ss, c_sd, s_ss, s_sd};
    switch (dtype) {
        case 0: return launch<float>(x, cos_table, sin_table, out, shape, stream);
        case 1: return launch<__half>(x, cos_table, sin_table, out, shape, stream);
        case 2: return launch<__nv_bfloat16>(x, cos_table, sin_table, out, shape, stream);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS, "VECTORIZE": VECTORIZE,
                                         "MAX_BLOCKS": MAX_BLOCKS})


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.ndim != 4:
        raise ValueError(f"rotary_embedding expects x [B, H, S, D]; got {tuple(x.shape)}")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"rotary_embedding supports fp32, fp16 and bf16, not {x.dtype}")
    b, h, s, d = x.shape
    if d % 2:
        raise ValueError(f"rotary_embedding needs an even head dim D; got {d}")
    if cos.shape != (s, d) or sin.shape != (s, d):
        raise ValueError(f"cos and sin must be [S, D] = [{s}, {d}]; got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    out = torch.empty((b, h, s, d), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    EXTENSION.launch("rotary_launch", x, cos, sin, out, b, h, s, d, *x.stride(), *cos.stride(),
                     *sin.stride(), DTYPE_CODES[x.dtype])
    return out
