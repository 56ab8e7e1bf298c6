"""Matmul, in CUDA C++: C[..., M, N] = A[..., M, K] @ B[..., K, N] (torch.matmul semantics for
operands of two or more dims, batch dims broadcast), C contiguous in A's dtype.

Algorithm, fp16/bf16: tensor cores through WMMA (nvcuda::wmma 16x16x16 fragments, fp32
accumulate). A block of WARPS_M x WARPS_N warps owns one BLOCK_M x BLOCK_N tile of one matrix
of C and walks K in BLOCK_K steps: the A and B tiles are copied into shared memory (zero-filled
outside the matrix, so ragged M, N and K need no special case), each warp multiplies its
(BLOCK_M/WARPS_M) x (BLOCK_N/WARPS_N) sub-tile with mma_sync, and the accumulators leave through
a per-warp 16x16 float staging buffer, each element stored only if it lies inside C (the edge
path), rounded to C's dtype once. Tiles of all matrices of the batch are numbered in one 1-D
grid, walked grid-stride (so 65537 matrices need no grid y/z axis).

Algorithm, fp32: a plain tiled SIMT kernel (no tensor cores, no TF32): 64x64 tiles, BLOCK 16
deep in K, 256 threads each computing a 4x4 patch with fp32 FMAs, so the result has ordinary
fp32 accuracy (TF32 would miss fp32's 1e-4 tolerance).

Loads: operands are read through their own strides (transposed views and stride-0 broadcast
batch dims cost no copy; more than one batch dim is reshaped, which copies when strides do not
merge). Where a tile row is contiguous in memory, 16-byte chunks that lie wholly inside the
matrix and are 16-byte aligned are moved as one vector; every other element is a scalar,
bounds-checked load.

Limits: one shared-memory stage (no cp.async pipelining or double buffering), no wgmma/TMA,
no split-K and no L2 tile swizzle: correct for any M, N, K (including K = 0: C = 0), not tuned
for peak. A column-major B (x @ Wᵀ) is loaded by scalar loads (coalesced along K) into a
row-major tile, with shared-memory bank conflicts on the stores. A 64x64 warp tile
(BLOCK_M = BLOCK_N = 128 with 2 x 2 warps) spills registers at BLOCK_K = 64 (ptxas, sm_90a):
legal, but slow. int64 indexing throughout.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "matmul"
BACKEND = "cuda"

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
WARPS_M = 2
WARPS_N = 4
TUNABLE_SPACE = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [16, 32, 64],
                 "WARPS_M": [2, 4], "WARPS_N": [2, 4]}

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef BLOCK_K
#define BLOCK_K 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#define WMMA_THREADS (32 * WARPS_M * WARPS_N)
#define WARP_TILE_M (BLOCK_M / WARPS_M)
#define WARP_TILE_N (BLOCK_N / WARPS_N)
#define FRAGS_M (WARP_TILE_M / 16)
#define FRAGS_N (WARP_TILE_N / 16)
static_assert(BLOCK_M % (16 * WARPS_M) == 0, "BLOCK_M: a multiple of 16 rows per warp");
static_assert(BLOCK_N % (16 * WARPS_N) == 0, "BLOCK_N: a multiple of 16 columns per warp");
static_assert(BLOCK_K % 16 == 0, "BLOCK_K: a multiple of the 16-deep fragment");
static_assert(WMMA_THREADS <= 1024, "at most 32 warps");

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

struct Problem {
    int64_t batch, m, n, k;
    int64_t a_sb, a_sm, a_sk;  // A's strides (batch, row, column), in elements
    int64_t b_sb, b_sk, b_sn;  // B's strides
    int64_t tiles_m, tiles_n;
};

// dst[r * LD + c] = the source element (r, c) at src[r * s_r + c * s_c] for r < ROWS, c < COLS,
// or 0 where r >= row_lim or c >= col_lim (outside the matrix). Only in-bounds elements are read.
template <typename T, int ROWS, int COLS, int LD, int NTHREADS>
__device__ __forceinline__ void load_tile(T* __restrict__ dst, const T* __restrict__ src,
                                          int64_t s_r, int64_t s_c, int64_t row_lim,
                                          int64_t col_lim) {
    constexpr int VEC = 16 / sizeof(T);
    static_assert(COLS % VEC == 0 && LD % VEC == 0, "tile rows are whole 16-byte chunks");
    const T zero = from_float<T>(0.0f);
    if (s_c == 1) {
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
            if (c + VEC <= col_lim && reinterpret_cast<uintptr_t>(in) % 16 == 0) {
                *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(in);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) out[i] = c + i < col_lim ? in[i] : zero;
            }
        }
    } else {
        // Rows fastest: when s_r == 1 (a transposed view) neighbouring threads read neighbours.
        for (int e = threadIdx.x; e < ROWS * COLS; e += NTHREADS) {
            const int r = e % ROWS, c = e / ROWS;
            dst[r * LD + c] = (r < row_lim && c < col_lim) ? src[r * s_r + c * s_c] : zero;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(WMMA_THREADS) gemm_wmma(const T* __restrict__ a,
                                                          const T* __restrict__ b,
                                                          T* __restrict__ c, Problem p) {
    constexpr int LDA = BLOCK_K + 16 / sizeof(T);  // padded rows: fewer bank conflicts
    constexpr int LDB = BLOCK_N + 16 / sizeof(T);
    // WMMA fragment pointers must be 32-byte aligned: bases here, and every fragment's offset is
    // a multiple of 16 rows (16 * LD * 2 bytes) plus a multiple of 16 columns (32 bytes).
    __shared__ __align__(128) T a_tile[BLOCK_M * LDA];
    __shared__ __align__(128) T b_tile[BLOCK_K * LDB];
    __shared__ __align__(128) float staging[WARPS_M * WARPS_N][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int64_t per_matrix = p.tiles_m * p.tiles_n;
    const int64_t total = p.batch * per_matrix;
    for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
        const int64_t batch = tile / per_matrix, rest = tile % per_matrix;
        const int64_t row0 = (rest / p.tiles_n) * BLOCK_M, col0 = (rest % p.tiles_n) * BLOCK_N;
        const T* a_base = a + batch * p.a_sb + row0 * p.a_sm;
        const T* b_base = b + batch * p.b_sb + col0 * p.b_sn;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FRAGS_M][FRAGS_N];
#pragma unroll
        for (int i = 0; i < FRAGS_M; ++i)
#pragma unroll
            for (int j = 0; j < FRAGS_N; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
        for (int64_t k0 = 0; k0 < p.k; k0 += BLOCK_K) {
            load_tile<T, BLOCK_M, BLOCK_K, LDA, WMMA_THREADS>(a_tile, a_base + k0 * p.a_sk, p.a_sm,
                                                              p.a_sk, p.m - row0, p.k - k0);
            load_tile<T, BLOCK_K, BLOCK_N, LDB, WMMA_THREADS>(b_tile, b_base + k0 * p.b_sk, p.b_sk,
                                                              p.b_sn, p.k - k0, p.n - col0);
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FRAGS_M];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[FRAGS_N];
#pragma unroll
                for (int i = 0; i < FRAGS_M; ++i)
                    wmma::load_matrix_sync(
                        fa[i], a_tile + (warp_m * WARP_TILE_M + i * 16) * LDA + kk, LDA);
#pragma unroll
                for (int j = 0; j < FRAGS_N; ++j)
                    wmma::load_matrix_sync(fb[j], b_tile + kk * LDB + warp_n * WARP_TILE_N + j * 16,
                                           LDB);
#pragma unroll
                for (int i = 0; i < FRAGS_M; ++i)
#pragma unroll
                    for (int j = 0; j < FRAGS_N; ++j)
                        wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
            __syncthreads();  // the tiles are overwritten by the next K step
        }
        float* mine = staging[warp];
#pragma unroll
        for (int i = 0; i < FRAGS_M; ++i) {
#pragma unroll
            for (int j = 0; j < FRAGS_N; ++j) {
                wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
                __syncwarp();
                const int64_t r0 = row0 + warp_m * WARP_TILE_M + i * 16;
                const int64_t c0 = col0 + warp_n * WARP_TILE_N + j * 16;
                for (int e = lane; e < 256; e += 32) {
                    const int64_t r = r0 + e / 16, col = c0 + e % 16;
                    if (r < p.m && col < p.n)
                        c[(batch * p.m + r) * p.n + col] = from_float<T>(mine[e]);
                }
                __syncwarp();  // the staging buffer is reused by the next fragment
            }
        }
    }
}

__global__ void __launch_bounds__(F32_THREADS) gemm_fp32(const float* __restrict__ a,
                                                         const float* __restrict__ b,
                                                         float* __restrict__ c, Problem p) {
    constexpr int LDA = F32_BK + 4, LDB = F32_BN + 4;
    __shared__ __align__(16) float a_tile[F32_BM * LDA];
    __shared__ __align__(16) float b_tile[F32_BK * LDB];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t per_matrix = p.tiles_m * p.tiles_n;
    const int64_t total = p.batch * per_matrix;
    for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
        const int64_t batch = tile / per_matrix, rest = tile % per_matrix;
        const int64_t row0 = (rest / p.tiles_n) * F32_BM, col0 = (rest % p.tiles_n) * F32_BN;
        const float* a_base = a + batch * p.a_sb + row0 * p.a_sm;
        const float* b_base = b + batch * p.b_sb + col0 * p.b_sn;
        float acc[4][4] = {};
        for (int64_t k0 = 0; k0 < p.k; k0 += F32_BK) {
            load_tile<float, F32_BM, F32_BK, LDA, F32_THREADS>(a_tile, a_base + k0 * p.a_sk, p.a_sm,
                                                               p.a_sk, p.m - row0, p.k - k0);
            load_tile<float, F32_BK, F32_BN, LDB, F32_THREADS>(b_tile, b_base + k0 * p.b_sk, p.b_sk,
                                                               p.b_sn, p.k - k0, p.n - col0);
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < F32_BK; ++kk) {
                float av[4], bv[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) av[i] = a_tile[(ty + 16 * i) * LDA + kk];
#pragma unroll
                for (int j = 0; j < 4; ++j) bv[j] = b_tile[kk * LDB + tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t r = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
                if (r < p.m && col < p.n) c[(batch * p.m + r) * p.n + col] = acc[i][j];
            }
        }
    }
}

static unsigned grid_for(int64_t tiles) {
    const int64_t cap = int64_t(1) << 20;  // more tiles are walked grid-stride
    return static_cast<unsigned>(tiles < cap ? tiles : cap);
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (a, b and c alike). c is contiguous [batch, m, n]; a's element
// (t, i, l) is at t * a_sb + i * a_sm + l * a_sk, b's (t, l, j) at t * b_sb + l * b_sk + j * b_sn.
extern "C" int matmul_launch(const void* a, const void* b, void* c, int64_t batch, int64_t m,
                             int64_t n, int64_t k, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                             int64_t b_sb, int64_t b_sk, int64_t b_sn, int64_t dtype,
                             cudaStream_t stream) {
    if (batch < 0 || m < 0 || n < 0 || k < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (batch == 0 || m == 0 || n == 0) return 0;  // empty C: nothing to launch
    Problem p{batch, m, n, k, a_sb, a_sm, a_sk, b_sb, b_sk, b_sn, 0, 0};
    if (dtype == 0) {
        p.tiles_m = (m + F32_BM - 1) / F32_BM;
        p.tiles_n = (n + F32_BN - 1) / F32_BN;
        gemm_fp32<<<grid_for(batch * p.tiles_m * p.tiles_n), F32_THREADS, 0, stream>>>(
            static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c), p);
        return static_cast<int>(cudaGetLastError());
    }
    p.tiles_m = (m + BLOCK_M - 1) / BLOCK_M;
    p.tiles_n = (n + BLOCK_N - 1) / BLOCK_N;
    const unsigned blocks = grid_for(batch * p.tiles_m * p.tiles_n);
    if (dtype == 1)
        gemm_wmma<__half><<<blocks, WMMA_THREADS, 0, stream>>>(
            static_cast<const __half*>(a), static_cast<const __half*>(b), static_cast<__half*>(c),
            p);
    else if (dtype == 2)
        gemm_wmma<__nv_bfloat16><<<blocks, WMMA_THREADS, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b),
            static_cast<__nv_bfloat16*>(c), p);
    else
        return static_cast<int>(cudaErrorInvalidValue);
    return static_cast<int>(cudaGetLastError());
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N,
                                         "BLOCK_K": BLOCK_K, "WARPS_M": WARPS_M,
                                         "WARPS_N": WARPS_N})


def _as_batch_of_matrices(t: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    """t broadcast to [*batch, rows, cols], as one [batch_size, rows, cols] tensor: a view
    (stride 0 where broadcast) for up to one batch dim, a reshape (maybe a copy) for more."""
    expanded = t.expand(*batch, *t.shape[-2:])
    if not batch:
        return expanded.unsqueeze(0)
    return expanded if len(batch) == 1 else expanded.reshape(-1, *t.shape[-2:])


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs operands of 2+ dims; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in DTYPE_CODES:
        raise TypeError(f"matmul needs a and b of one dtype in fp32/fp16/bf16; got {a.dtype} "
                        f"and {b.dtype}")
    m, k = a.shape[-2:]
    k_b, n = b.shape[-2:]
    if k != k_b:
        raise ValueError(f"inner dims differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    c = torch.empty((*batch, m, n), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    a3, b3 = _as_batch_of_matrices(a, batch), _as_batch_of_matrices(b, batch)
    EXTENSION.launch("matmul_launch", a3, b3, c, a3.shape[0], m, n, k, *a3.stride(),
                     *b3.stride(), DTYPE_CODES[a.dtype])
    return c
