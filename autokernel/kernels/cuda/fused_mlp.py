"""Fused MLP (SwiGLU), in CUDA C++: out = (silu(x W_gateᵀ) * (x W_upᵀ)) W_downᵀ.

x [M, D]; w_gate, w_up [H, D]; w_down [D, H] (nn.Linear layouts), any strides; out [M, D]
contiguous in x's dtype.

Algorithm, two launches of one "NT" GEMM template (C[M, N] = A[M, K] · B[N, K]ᵀ, both operands
read along K):
  1. gate/up (GATED): a block owns a GATE_BLOCK_M x GATE_BLOCK_N tile of hidden [M, H] and walks
     D in GATE_BLOCK_K steps, one x tile feeding two accumulators (gate and up), so x is read
     once for both projections. The epilogue applies silu(gate) * up in float32 on the
     accumulator fragments and stores hidden rounded to x's dtype (the rounding the reference
     applies before the down projection).
  2. down: out = hidden · W_downᵀ, W_down read through its strides (no transposed copy).
fp16/bf16 run on tensor cores through WMMA (nvcuda::wmma 16x16x16 fragments, fp32 accumulate):
the A and B tiles go through shared memory (zero-filled outside the matrices, so ragged M, D and H
need no special case; rows padded by 16 bytes against bank conflicts), and accumulators leave
through a per-warp 16x16 float staging buffer, each element stored only if it lies inside C.
fp32 runs a plain tiled SIMT kernel (64x64 tiles, 4x4 patch per thread, fp32 FMAs; no TF32, which
would miss fp32's tolerance). MIN_BLOCKS is the WMMA kernels' `__launch_bounds__` minimum
blocks per SM: 2 caps registers at 128 (more warps resident, but the gated kernel spills a few
bytes); 1 lets ptxas use ~190 (no spills, one 8-warp block per SM). Tiles are numbered in
groups of GROUP_M row-tiles (L2 swizzle), and walked grid-stride. silu(g) = g / (1 + exp(-g)):
exp overflowing for g < -88 gives -0, the right limit.

Loads: where a tile row is contiguous along K, 16-byte chunks wholly inside the matrix and 16-byte
aligned move as one vector; every other element is a scalar, bounds-checked load. int64 indexing.

SwiGLU only: the op's GeGLU activations ("gelu", "gelu_tanh") raise NotImplementedError, so a
routed GeGLU call falls back to PyTorch; the Triton starter computes all three.

Limits: one shared-memory stage (no cp.async pipelining or double buffering), no wgmma/TMA, no
split-K, and hidden [M, H] makes a round trip through global memory between the two launches.
fp32's SIMT tiles have 2-way bank conflicts on the B reads. Large warp tiles (64x64: BLOCK 128
with 2 x 2 warps) spill registers in the gated kernel: legal, but slow. Correct for any M, D, H
(D = 0 or H = 0 included). Untested on a GPU so far (compiled for sm_90a only).
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "fused_mlp"
BACKEND = "cuda"

GATE_BLOCK_M = 128
GATE_BLOCK_N = 64
GATE_BLOCK_K = 32
GATE_WARPS_M = 4
GATE_WARPS_N = 2
DOWN_BLOCK_M = 128
DOWN_BLOCK_N = 128
DOWN_BLOCK_K = 32
DOWN_WARPS_M = 2
DOWN_WARPS_N = 4
GROUP_M = 8
MIN_BLOCKS = 1
TUNABLE_SPACE = {
    "GATE_BLOCK_M": [64, 128], "GATE_BLOCK_N": [64, 128], "GATE_BLOCK_K": [16, 32, 64],
    "GATE_WARPS_M": [2, 4], "GATE_WARPS_N": [2, 4],
    "DOWN_BLOCK_M": [64, 128], "DOWN_BLOCK_N": [64, 128], "DOWN_BLOCK_K": [16, 32, 64],
    "DOWN_WARPS_M": [2, 4], "DOWN_WARPS_N": [2, 4],
    "GROUP_M": [1, 4, 8, 16], "MIN_BLOCKS": [1, 2],
}

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#ifndef GATE_BLOCK_M
#define GATE_BLOCK_M 128
#endif
#ifndef GATE_BLOCK_N
#define GATE_BLOCK_N 64
#endif
#ifndef GATE_BLOCK_K
#define GATE_BLOCK_K 32
#endif
#ifndef GATE_WARPS_M
#define GATE_WARPS_M 4
#endif
#ifndef GATE_WARPS_N
#define GATE_WARPS_N 2
#endif
#ifndef DOWN_BLOCK_M
#define DOWN_BLOCK_M 128
#endif
#ifndef DOWN_BLOCK_N
#define DOWN_BLOCK_N 128
#endif
#ifndef DOWN_BLOCK_K
#define DOWN_BLOCK_K 32
#endif
#ifndef DOWN_WARPS_M
#define DOWN_WARPS_M 2
#endif
#ifndef DOWN_WARPS_N
#define DOWN_WARPS_N 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define F32_BM 64
#define F32_BN 64
#define F32_BK 16
#define F32_THREADS 256  // 16 x 16 threads, a 4 x 4 patch each

using namespace nvcuda;

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

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// C[m, n] = sum_k A[m, k] * B[n, k] (times B1 for the gated launch); strides in elements.
struct NtProblem {
    int64_t m, n, k;
    int64_t a_sm, a_sk;
    int64_t b0_sn, b0_sk, b1_sn, b1_sk;
    int64_t ldc;  // C is row-major with unit column stride
    int64_t tiles_m, tiles_n;
};

// Tile t of the grid-stride walk as (row tile, column tile), GROUP_M row tiles at a time, so the
// B tiles one group sweeps stay in L2.
__device__ __forceinline__ void grouped_tile(int64_t t, const NtProblem& p, int64_t& tm,
                                             int64_t& tn) {
    const int64_t per_group = int64_t(GROUP_M) * p.tiles_n;
    const int64_t first = (t / per_group) * GROUP_M;
    const int64_t rows = p.tiles_m - first < GROUP_M ? p.tiles_m - first : GROUP_M;
    const int64_t within = t % per_group;
    tm = first + within % rows;
    tn = within / rows;
}

// dst[r * LD + c] = src[r * s_r + c * s_k] for r < ROWS, c < COLS, or 0 where r >= row_lim or
// c >= k_lim (outside the matrix). Only in-bounds elements are read.
template <typename T, int ROWS, int COLS, int LD, int NTHREADS>
__device__ __forceinline__ void load_rows(T* __restrict__ dst, const T* __restrict__ src,
                                          int64_t s_r, int64_t s_k, int64_t row_lim,
                                          int64_t k_lim) {
    constexpr int VEC = 16 / sizeof(T);
    static_assert(COLS % VEC == 0 && LD % VEC == 0, "tile rows are whole 16-byte chunks");
    const T zero = from_float<T>(0.0f);
    if (s_k == 1) {
        constexpr int CHUNKS = COLS / VEC;
        for (int e = threadIdx.x; e < ROWS * CHUNKS; e += NTHREADS) {
            const int r = e / CHUNKS, c = (e % CHUNKS) * VEC;
            T* out = dst + r * LD + c;
            if (r >= row_lim) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) out[i] = zero;
                continue;
            }
            const T* in = src + r * s_r + c;
            if (c + VEC <= k_lim && reinterpret_cast<uintptr_t>(in) % 16 == 0) {
                *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(in);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) out[i] = c + i < k_lim ? in[i] : zero;
            }
        }
    } else {
        // Rows fastest: when s_r == 1 (a transposed view) neighbouring threads read neighbours.
        for (int e = threadIdx.x; e < ROWS * COLS; e += NTHREADS) {
            const int r = e % ROWS, c = e / ROWS;
            dst[r * LD + c] = (r < row_lim && c < k_lim) ? src[r * s_r + c * s_k] : zero;
        }
    }
}

template <typename T, int BM, int BN, int BK>
struct WmmaShape {
    static constexpr int LDK = BK + 16 / sizeof(T);  // padded rows: fewer bank conflicts
    static constexpr int A_BYTES = BM * LDK * sizeof(T);
    static constexpr int B_BYTES = BN * LDK * sizeof(T);  // a multiple of 32: fragments align
};

template <typename T, bool GATED, int BM, int BN, int BK, int WM, int WN>
constexpr int wmma_smem_bytes() {
    using S = WmmaShape<T, BM, BN, BK>;
    return S::A_BYTES + (GATED ? 2 : 1) * S::B_BYTES + WM * WN * 16 * 16 * sizeof(float);
}

template <typename T, bool GATED, int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__(32 * WM * WN, MIN_BLOCKS) nt_gemm_wmma(
        const T* __restrict__ a, const T* __restrict__ b0, const T* __restrict__ b1,
        T* __restrict__ c, NtProblem p) {
    constexpr int THREADS = 32 * WM * WN, WARP_M = BM / WM, WARP_N = BN / WN;
    constexpr int FRAGS_M = WARP_M / 16, FRAGS_N = WARP_N / 16;
    static_assert(BM % (16 * WM) == 0 && BN % (16 * WN) == 0 && BK % 16 == 0,
                  "tiles: whole 16x16x16 fragments per warp");
    static_assert(THREADS <= 1024, "at most 32 warps");
    using S = WmmaShape<T, BM, BN, BK>;
    constexpr int LDK = S::LDK;
    // WMMA pointers must be 32-byte aligned: every region's size is a multiple of 32 bytes, and
    // fragment offsets are 16 rows (32 * LDK bytes) or 16 columns (32 bytes) apart.
    extern __shared__ __align__(128) unsigned char smem[];
    T* a_tile = reinterpret_cast<T*>(smem);
    T* b0_tile = reinterpret_cast<T*>(smem + S::A_BYTES);
    T* b1_tile = reinterpret_cast<T*>(smem + S::A_BYTES + S::B_BYTES);
    float* staging = reinterpret_cast<float*>(smem + S::A_BYTES + (GATED ? 2 : 1) * S::B_BYTES);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp / WN, warp_n = warp % WN;
    float* mine = staging + warp * 256;
    const int64_t total = p.tiles_m * p.tiles_n;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int64_t tm, tn;
        grouped_tile(t, p, tm, tn);
        const int64_t row0 = tm * BM, col0 = tn * BN;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc0[FRAGS_M][FRAGS_N];
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc1[GATED ? FRAGS_M : 1]
                                                                 [GATED ? FRAGS_N : 1];
#pragma unroll
        for (int i = 0; i < FRAGS_M; ++i)
#pragma unroll
            for (int j = 0; j < FRAGS_N; ++j) {
                wmma::fill_fragment(acc0[i][j], 0.0f);
                if constexpr (GATED) wmma::fill_fragment(acc1[i][j], 0.0f);
            }
        for (int64_t k0 = 0; k0 < p.k; k0 += BK) {
            load_rows<T, BM, BK, LDK, THREADS>(a_tile, a + row0 * p.a_sm + k0 * p.a_sk, p.a_sm,
                                               p.a_sk, p.m - row0, p.k - k0);
            load_rows<T, BN, BK, LDK, THREADS>(b0_tile, b0 + col0 * p.b0_sn + k0 * p.b0_sk,
                                               p.b0_sn, p.b0_sk, p.n - col0, p.k - k0);
            if constexpr (GATED)
                load_rows<T, BN, BK, LDK, THREADS>(b1_tile, b1 + col0 * p.b1_sn + k0 * p.b1_sk,
                                                   p.b1_sn, p.b1_sk, p.n - col0, p.k - k0);
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FRAGS_M];
#pragma unroll
                for (int i = 0; i < FRAGS_M; ++i)
                    wmma::load_matrix_sync(fa[i], a_tile + (warp_m * WARP_M + i * 16) * LDK + kk,
                                           LDK);
#pragma unroll
                for (int j = 0; j < FRAGS_N; ++j) {
                    // B[n, k] rows in shared memory are Bᵀ's columns: a col_major matrix_b.
                    const int b_off = (warp_n * WARP_N + j * 16) * LDK + kk;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                    wmma::load_matrix_sync(fb, b0_tile + b_off, LDK);
#pragma unroll
                    for (int i = 0; i < FRAGS_M; ++i)
                        wmma::mma_sync(acc0[i][j], fa[i], fb, acc0[i][j]);
                    if constexpr (GATED) {
                        wmma::load_matrix_sync(fb, b1_tile + b_off, LDK);
#pragma unroll
                        for (int i = 0; i < FRAGS_M; ++i)
                            wmma::mma_sync(acc1[i][j], fa[i], fb, acc1[i][j]);
                    }
                }
            }
            __syncthreads();  // the tiles are overwritten by the next K step
        }
#pragma unroll
        for (int i = 0; i < FRAGS_M; ++i) {
#pragma unroll
            for (int j = 0; j < FRAGS_N; ++j) {
                if constexpr (GATED) {
                    // Two accumulators of one type share one element layout: elementwise is safe.
#pragma unroll
                    for (int e = 0; e < acc0[i][j].num_elements; ++e)
                        acc0[i][j].x[e] = silu(acc0[i][j].x[e]) * acc1[i][j].x[e];
                }
                wmma::store_matrix_sync(mine, acc0[i][j], 16, wmma::mem_row_major);
                __syncwarp();
                const int64_t r0 = row0 + warp_m * WARP_M + i * 16;
                const int64_t c0 = col0 + warp_n * WARP_N + j * 16;
                for (int e = lane; e < 256; e += 32) {
                    const int64_t r = r0 + e / 16, col = c0 + e % 16;
                    if (r < p.m && col < p.n) c[r * p.ldc + col] = from_float<T>(mine[e]);
                }
                __syncwarp();  // the staging buffer is reused by the next fragment
            }
        }
    }
}

template <bool GATED>
__global__ void __launch_bounds__(F32_THREADS) nt_gemm_fp32(
        const float* __restrict__ a, const float* __restrict__ b0, const float* __restrict__ b1,
        float* __restrict__ c, NtProblem p) {
    constexpr int LD = F32_BK + 4;
    __shared__ __align__(16) float a_tile[F32_BM * LD];
    __shared__ __align__(16) float b0_tile[F32_BN * LD];
    __shared__ __align__(16) float b1_tile[GATED ? F32_BN * LD : 4];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t total = p.tiles_m * p.tiles_n;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int64_t tm, tn;
        grouped_tile(t, p, tm, tn);
        const int64_t row0 = tm * F32_BM, col0 = tn * F32_BN;
        float acc0[4][4] = {}, acc1[4][4] = {};
        for (int64_t k0 = 0; k0 < p.k; k0 += F32_BK) {
            load_rows<float, F32_BM, F32_BK, LD, F32_THREADS>(
                a_tile, a + row0 * p.a_sm + k0 * p.a_sk, p.a_sm, p.a_sk, p.m - row0, p.k - k0);
            load_rows<float, F32_BN, F32_BK, LD, F32_THREADS>(
                b0_tile, b0 + col0 * p.b0_sn + k0 * p.b0_sk, p.b0_sn, p.b0_sk, p.n - col0,
                p.k - k0);
            if constexpr (GATED)
                load_rows<float, F32_BN, F32_BK, LD, F32_THREADS>(
                    b1_tile, b1 + col0 * p.b1_sn + k0 * p.b1_sk, p.b1_sn, p.b1_sk, p.n - col0,
                    p.k - k0);
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < F32_BK; ++kk) {
                float av[4], bv0[4], bv1[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) av[i] = a_tile[(ty + 16 * i) * LD + kk];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    bv0[j] = b0_tile[(tx + 16 * j) * LD + kk];
                    if constexpr (GATED) bv1[j] = b1_tile[(tx + 16 * j) * LD + kk];
                }
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        acc0[i][j] = fmaf(av[i], bv0[j], acc0[i][j]);
                        if constexpr (GATED) acc1[i][j] = fmaf(av[i], bv1[j], acc1[i][j]);
                    }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t r = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
                const float value = GATED ? silu(acc0[i][j]) * acc1[i][j] : acc0[i][j];
                if (r < p.m && col < p.n) c[r * p.ldc + col] = value;
            }
        }
    }
}

static unsigned grid_for(int64_t tiles) {
    const int64_t cap = int64_t(1) << 20;  // more tiles are walked grid-stride
    return static_cast<unsigned>(tiles < cap ? tiles : cap);
}

template <typename T, bool GATED, int BM, int BN, int BK, int WM, int WN>
static int launch_wmma(const void* a, const void* b0, const void* b1, void* c, NtProblem p,
                       cudaStream_t stream) {
    constexpr int bytes = wmma_smem_bytes<T, GATED, BM, BN, BK, WM, WN>();
    auto kernel = nt_gemm_wmma<T, GATED, BM, BN, BK, WM, WN>;
    // Over 48 KB of dynamic shared memory needs the opt-in (Volta and later allow it).
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           bytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    p.tiles_m = (p.m + BM - 1) / BM;
    p.tiles_n = (p.n + BN - 1) / BN;
    if (p.tiles_m * p.tiles_n == 0) return 0;  // an empty C (H = 0): nothing to launch
    kernel<<<grid_for(p.tiles_m * p.tiles_n), 32 * WM * WN, bytes, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b0), static_cast<const T*>(b1),
        static_cast<T*>(c), p);
    return static_cast<int>(cudaGetLastError());
}

template <bool GATED>
static int launch_fp32(const void* a, const void* b0, const void* b1, void* c, NtProblem p,
                       cudaStream_t stream) {
    p.tiles_m = (p.m + F32_BM - 1) / F32_BM;
    p.tiles_n = (p.n + F32_BN - 1) / F32_BN;
    if (p.tiles_m * p.tiles_n == 0) return 0;
    nt_gemm_fp32<GATED><<<grid_for(p.tiles_m * p.tiles_n), F32_THREADS, 0, stream>>>(
        static_cast<const float*>(a), static_cast<const float*>(b0),
        static_cast<const float*>(b1), static_cast<float*>(c), p);
    return static_cast<int>(cudaGetLastError());
}

template <typename T>
static int launch_mlp(const void* x, const void* w_gate, const void* w_up, const void* w_down,
                      void* hidden, void* out, const NtProblem& gate, const NtProblem& down,
                      cudaStream_t stream) {
    int err = launch_wmma<T, true, GATE_BLOCK_M, GATE_BLOCK_N, GATE_BLOCK_K, GATE_WARPS_M,
                          GATE_WARPS_N>(x, w_gate, w_up, hidden, gate, stream);
    if (err != 0) return err;
    return launch_wmma<T, false, DOWN_BLOCK_M, DOWN_BLOCK_N, DOWN_BLOCK_K, DOWN_WARPS_M,
                       DOWN_WARPS_N>(hidden, w_down, w_down, out, down, stream);
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (every tensor alike). hidden [m, h] and out [m, d] are
// contiguous; x's element (i, l) is at i * x_sm + l * x_sd, w_gate's (j, l) at j * g_sh + l * g_sd,
// w_up's likewise, w_down's (l, j) at l * dn_sd + j * dn_sh.
extern "C" int fused_mlp_launch(const void* x, const void* w_gate, const void* w_up,
                                const void* w_down, void* hidden, void* out, int64_t m, int64_t d,
                                int64_t h, int64_t x_sm, int64_t x_sd, int64_t g_sh,
                                int64_t g_sd, int64_t u_sh, int64_t u_sd, int64_t dn_sd,
                                int64_t dn_sh, int64_t dtype, cudaStream_t stream) {
    if (m < 0 || d < 0 || h < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (m == 0 || d == 0) return 0;  // empty out: nothing to launch
    // hidden = silu(x W_gateᵀ) * (x W_upᵀ): A = x, B0 = W_gate, B1 = W_up, K = d.
    const NtProblem gate{m, h, d, x_sm, x_sd, g_sh, g_sd, u_sh, u_sd, h, 0, 0};
    // out = hidden W_downᵀ: A = hidden (contiguous), B0 = W_down read as [d, h] rows, K = h.
    const NtProblem down{m, d, h, h, 1, dn_sd, dn_sh, dn_sd, dn_sh, d, 0, 0};
    switch (dtype) {
        case 0: {
            const int err = launch_fp32<true>(x, w_gate, w_up, hidden, gate, stream);
            return err != 0 ? err : launch_fp32<false>(hidden, w_down, w_down, out, down, stream);
        }
        case 1: return launch_mlp<__half>(x, w_gate, w_up, w_down, hidden, out, gate, down, stream);
        case 2:
            return launch_mlp<__nv_bfloat16>(x, w_gate, w_up, w_down, hidden, out, gate, down,
                                             stream);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {
    "GATE_BLOCK_M": GATE_BLOCK_M, "GATE_BLOCK_N": GATE_BLOCK_N, "GATE_BLOCK_K": GATE_BLOCK_K,
    "GATE_WARPS_M": GATE_WARPS_M, "GATE_WARPS_N": GATE_WARPS_N,
    "DOWN_BLOCK_M": DOWN_BLOCK_M, "DOWN_BLOCK_N": DOWN_BLOCK_N, "DOWN_BLOCK_K": DOWN_BLOCK_K,
    "DOWN_WARPS_M": DOWN_WARPS_M, "DOWN_WARPS_N": DOWN_WARPS_N, "GROUP_M": GROUP_M,
    "MIN_BLOCKS": MIN_BLOCKS})


def kernel_fn(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
              w_down: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """SwiGLU MLP in x's dtype (fp32 accumulation, hidden rounded to x's dtype)."""
    if activation != "silu":
        raise NotImplementedError(f"the CUDA starter computes SwiGLU only, not {activation!r}")
    if x.ndim != 2 or w_gate.ndim != 2 or w_gate.shape != w_up.shape or \
            w_gate.shape[1] != x.shape[1] or tuple(w_down.shape) != (x.shape[1], w_gate.shape[0]):
        raise ValueError("fused_mlp needs x[M, D], w_gate[H, D], w_up[H, D], w_down[D, H]; got "
                         f"{tuple(x.shape)}, {tuple(w_gate.shape)}, {tuple(w_up.shape)}, "
                         f"{tuple(w_down.shape)}")
    if x.dtype not in DTYPE_CODES or any(w.dtype != x.dtype for w in (w_gate, w_up, w_down)):
        raise TypeError(f"fused_mlp needs x and the weights of one dtype in fp32/fp16/bf16; got "
                        f"{x.dtype}, {w_gate.dtype}, {w_up.dtype}, {w_down.dtype}")
    m, d = x.shape
    h = w_gate.shape[0]
    hidden = torch.empty((m, h), dtype=x.dtype, device=x.device)
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    EXTENSION.launch("fused_mlp_launch", x, w_gate, w_up, w_down, hidden, out, m, d, h,
                     *x.stride(), *w_gate.stride(), *w_up.stride(), *w_down.stride(),
                     DTYPE_CODES[x.dtype])
    return out
