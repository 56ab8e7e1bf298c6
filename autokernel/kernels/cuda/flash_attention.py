"""Flash attention, in CUDA C++: O = softmax(Q Kᵀ · scale [+ causal mask]) V.

q, k, v are [B, H, S, D] of one dtype (fp32, fp16, bf16), any strides; o is contiguous in q's
dtype; causal lets query i see keys 0..i; scale defaults to 1/sqrt(D).

Algorithm (FlashAttention-2 forward): one block per (batch·head, tile of BLOCK_M queries), heaviest
(last) query tile first, walked grid-stride. Each warp owns 16 query rows. The block stages its Q
tile in shared memory once, then streams keys in BLOCK_N tiles: the K tile is loaded (zero-filled
past S and past D), each warp computes its 16 x BLOCK_N scores, folds them into an online softmax
in float32 (running row max and row sum, log2 domain: scale·log2(e) is one multiply, exp2f), and
writes the probabilities rounded to the input dtype (as every FlashAttention does before PV); then
the V tile is loaded into the same buffer and each warp adds P·V to its output rows, rescaled by
exp2(m_old - m_new) first. The output accumulator is float32 in shared memory (WMMA does not
expose which fragment element is which row, so a row rescale cannot touch the fragments); it is
divided by the row sum once at the end and stored, bounds-checked, rounded to the output dtype.
Masking: keys >= S, and under causal keys > query, score -inf; a causal block stops at its
diagonal (early exit) and a warp skips any key tile wholly above its own rows.

fp16/bf16 take QKᵀ and PV on tensor cores through WMMA (nvcuda::wmma 16x16x16 fragments, fp32
accumulate); fp32 takes the same tiles with scalar FMAs (exact fp32; TF32 would miss fp32's
tolerance). The head dim is padded to a multiple of 16 in shared memory (zero-filled, so D = 80
or 72 costs no special case) and is a runtime value: one build serves every D.

Shared memory grows with D (dynamic, opted in past 48 KB): the launcher halves BLOCK_N, then
BLOCK_M (to 16, always whole 16-row fragments), until a block fits the GPU's per-block limit, so D = 256 runs with the tunables'
tiles and D = 1024 with 16 x 16 tiles on Hopper (227 KB). D above MAX_HEAD_DIM (1024, the
registry's widest) is refused with a ValueError, which a routed model call reports as "kernel
refused" and leaves to PyTorch (integrate/route_helpers.py `call_kernel`); on a GPU whose
shared memory cannot hold even 16 x 16 tiles of the head (fp32 past D ~ 700 on a 164 KB Ampere
A100; less on Ada's 99 KB) the launch fails with CUDA's "invalid configuration argument".

Loads: where a row is contiguous along D, 16-byte chunks wholly inside the head and 16-byte aligned
move as one vector; every other element is a scalar, bounds-checked load. int64 offsets.

Limits: K and V share one buffer and nothing is pipelined (no cp.async double buffering, no
wgmma/TMA), and the float32 output accumulator makes a shared-memory round trip per key tile, so
this is a correct, readable baseline, not FA2's speed; wide heads (D > 256) run with small tiles.
Checked on an H200 against the registry's reference in fp32, fp16 and bf16, D up to 1024.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "flash_attention"
BACKEND = "cuda"

BLOCK_M = 64
BLOCK_N = 64
TUNABLE_SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128]}

# The widest head dim the launcher takes; a wider one gets a ValueError.
MAX_HEAD_DIM = 1024
LOG2_E = 1.4426950408889634

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>
#include <type_traits>

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
static_assert(BLOCK_M % 16 == 0 && BLOCK_M >= 16 && BLOCK_M <= 512, "BLOCK_M: 16-row warps");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16, "BLOCK_N: whole 16-key fragments");
#define MAX_THREADS (32 * (BLOCK_M / 16))

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

struct Attention {
    int64_t batch_heads, heads, seq, head_dim;
    int64_t q_sb, q_sh, q_ss, q_sd;  // strides in elements
    int64_t k_sb, k_sh, k_ss, k_sd;
    int64_t v_sb, v_sh, v_ss, v_sd;
    float qk_scale;  // scale * log2(e)
    int causal;
};

// Shared-memory layout of one block, in elements; every region starts 128-byte aligned.
template <typename T>
struct Layout {
    int dp, bm, bn;               // head dim padded to 16; query and key tile sizes
    int ld_t, ld_o, ld_s, ld_p;   // row pitches: Q/KV tiles, O, scores, probabilities
    size_t q_off, kv_off, o_off, s_off, p_off, bytes;
    __host__ __device__ Layout(int64_t head_dim, int block_m, int block_n) {
        dp = static_cast<int>((head_dim + 15) / 16 * 16);
        bm = block_m;
        bn = block_n;
        // Padding against bank conflicts: 16 bytes for WMMA tiles (ld stays a multiple of 16
        // bytes); one float for fp32, whose scalar loops read KV rows across lanes.
        const bool f32 = sizeof(T) == 4;
        ld_t = dp + (f32 ? 1 : 16 / static_cast<int>(sizeof(T)));
        ld_o = dp + 4;
        ld_s = bn + 4;
        ld_p = bn + (f32 ? 1 : 16 / static_cast<int>(sizeof(T)));
        size_t at = 0;
        q_off = at; at = align(at + size_t(bm) * ld_t * sizeof(T));
        kv_off = at; at = align(at + size_t(bn) * ld_t * sizeof(T));
        o_off = at; at = align(at + size_t(bm) * ld_o * sizeof(float));
        s_off = at; at = align(at + size_t(bm) * ld_s * sizeof(float));
        p_off = at; at = align(at + size_t(bm) * ld_p * sizeof(T));
        bytes = at;
    }
    __host__ __device__ static size_t align(size_t n) { return (n + 127) / 128 * 128; }
};

// dst[r * ld + c] = src[r * s_r + c * s_c] for r < rows, c < cols (cols a multiple of 16), or 0
// where r >= row_lim or c >= col_lim. Only in-bounds elements are read.
template <typename T>
__device__ __forceinline__ void load_tile(T* __restrict__ dst, const T* __restrict__ src,
                                          int rows, int cols, int ld, int64_t s_r, int64_t s_c,
                                          int64_t row_lim, int64_t col_lim) {
    constexpr int VEC = 16 / sizeof(T);
    const T zero = from_float<T>(0.0f);
    if (s_c == 1 && ld % VEC == 0) {
        const int chunks = cols / VEC;
        for (int e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
            const int r = e / chunks, c = (e % chunks) * VEC;
            T* out = dst + r * ld + c;
            const T* in = src + r * s_r + c;
            if (r < row_lim && c + VEC <= col_lim && reinterpret_cast<uintptr_t>(in) % 16 == 0) {
                *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(in);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i)
                    out[i] = (r < row_lim && c + i < col_lim) ? in[i] : zero;
            }
        }
    } else {
        for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
            const int r = e / cols, c = e % cols;
            dst[r * ld + c] = (r < row_lim && c < col_lim) ? src[r * s_r + c * s_c] : zero;
        }
    }
}

// s[16, bn] = q[16, dp] · kv[bn, dp]ᵀ for one warp's rows (unscaled, fp32).
template <typename T>
__device__ __forceinline__ void warp_scores(const T* q, const T* kv, float* s, const Layout<T>& l,
                                            int lane) {
    if constexpr (std::is_same<T, float>::value) {
        for (int c = lane; c < l.bn; c += 32) {
            float acc[16] = {};
            for (int d = 0; d < l.dp; ++d) {
                const float key = kv[c * l.ld_t + d];
#pragma unroll
                for (int r = 0; r < 16; ++r) acc[r] = fmaf(q[r * l.ld_t + d], key, acc[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r) s[r * l.ld_s + c] = acc[r];
        }
    } else {
        for (int n = 0; n < l.bn; n += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int d = 0; d < l.dp; d += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                // K's rows are Kᵀ's columns: a col_major matrix_b.
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                wmma::load_matrix_sync(a, q + d, l.ld_t);
                wmma::load_matrix_sync(b, kv + n * l.ld_t + d, l.ld_t);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(s + n, acc, l.ld_s, wmma::mem_row_major);
        }
    }
}

// o[16, dp] += p[16, bn] · kv[bn, dp] for one warp's rows.
template <typename T>
__device__ __forceinline__ void warp_pv(const T* p, const T* kv, float* o, const Layout<T>& l,
                                        int lane) {
    if constexpr (std::is_same<T, float>::value) {
        for (int d = lane; d < l.dp; d += 32) {
            float acc[16] = {};
            for (int c = 0; c < l.bn; ++c) {
                const float value = kv[c * l.ld_t + d];
#pragma unroll
                for (int r = 0; r < 16; ++r) acc[r] = fmaf(p[r * l.ld_p + c], value, acc[r]);
            }
#pragma unroll
            for (int r = 0; r < 16; ++r) o[r * l.ld_o + d] += acc[r];
        }
    } else {
        for (int j = 0; j < l.dp; j += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, o + j, l.ld_o, wmma::mem_row_major);
            for (int c = 0; c < l.bn; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                wmma::load_matrix_sync(a, p + c, l.ld_p);
                wmma::load_matrix_sync(b, kv + c * l.ld_t + j, l.ld_t);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(o + j, acc, l.ld_o, wmma::mem_row_major);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(MAX_THREADS, 2) flash_forward(
        const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
        T* __restrict__ out, Attention a, int block_m, int block_n) {
    extern __shared__ __align__(128) unsigned char smem[];
    const Layout<T> l(a.head_dim, block_m, block_n);
    T* q_tile = reinterpret_cast<T*>(smem + l.q_off);
    T* kv_tile = reinterpret_cast<T*>(smem + l.kv_off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* o_rows = reinterpret_cast<float*>(smem + l.o_off) + warp * 16 * l.ld_o;
    float* s_rows = reinterpret_cast<float*>(smem + l.s_off) + warp * 16 * l.ld_s;
    T* p_rows = reinterpret_cast<T*>(smem + l.p_off) + warp * 16 * l.ld_p;
    const T* q_rows = q_tile + warp * 16 * l.ld_t;
    // Two lanes per row in the softmax: row `mine`, columns `half`, `half` + 2, ...
    const int mine = lane / 2, half = lane % 2;
    const int64_t q_tiles = (a.seq + l.bm - 1) / l.bm;
    for (int64_t t = blockIdx.x; t < a.batch_heads * q_tiles; t += gridDim.x) {
        // Heaviest first: under causal the last query tile sees the most keys.
        const int64_t bh = t / q_tiles, q0 = (q_tiles - 1 - t % q_tiles) * l.bm;
        const int64_t batch = bh / a.heads, head = bh % a.heads;
        const T* q_head = q + batch * a.q_sb + head * a.q_sh;
        const T* k_head = k + batch * a.k_sb + head * a.k_sh;
        const T* v_head = v + batch * a.v_sb + head * a.v_sh;
        __syncthreads();  // the previous tile's readers are done with shared memory
        load_tile<T>(q_tile, q_head + q0 * a.q_ss, l.bm, l.dp, l.ld_t, a.q_ss, a.q_sd,
                     a.seq - q0, a.head_dim);
        for (int e = lane; e < 16 * l.dp; e += 32) o_rows[(e / l.dp) * l.ld_o + e % l.dp] = 0.0f;
        float row_max = -INFINITY, row_sum = 0.0f;
        const int64_t query = q0 + warp * 16 + mine;
        const int64_t warp_last_query = q0 + warp * 16 + 15;
        const int64_t key_end = a.causal ? (q0 + l.bm < a.seq ? q0 + l.bm : a.seq) : a.seq;
        for (int64_t k0 = 0; k0 < key_end; k0 += l.bn) {
            // Causal: a tile whose first key lies past the warp's last query adds nothing to it.
            const bool active = !(a.causal && k0 > warp_last_query);
            __syncthreads();  // the last PV is done with kv_tile
            load_tile<T>(kv_tile, k_head + k0 * a.k_ss, l.bn, l.dp, l.ld_t, a.k_ss, a.k_sd,
                         a.seq - k0, a.head_dim);
            __syncthreads();
            if (active) {
                warp_scores<T>(q_rows, kv_tile, s_rows, l, lane);
                __syncwarp();
                float tile_max = -INFINITY;
                for (int c = half; c < l.bn; c += 2) {
                    const int64_t key = k0 + c;
                    const bool visible = key < a.seq && !(a.causal && key > query);
                    const float score = visible ? s_rows[mine * l.ld_s + c] * a.qk_scale
                                                : -INFINITY;
                    s_rows[mine * l.ld_s + c] = score;
                    tile_max = fmaxf(tile_max, score);
                }
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                const float new_max = fmaxf(row_max, tile_max);
                // A row that has seen no visible key yet keeps max -inf: p = 0, nothing rescaled.
                const bool any = new_max != -INFINITY;
                const float rescale = any ? exp2f(row_max - new_max) : 1.0f;
                float tile_sum = 0.0f;
                for (int c = half; c < l.bn; c += 2) {
                    const float p = any ? exp2f(s_rows[mine * l.ld_s + c] - new_max) : 0.0f;
                    tile_sum += p;
                    p_rows[mine * l.ld_p + c] = from_float<T>(p);
                }
                tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
                row_sum = row_sum * rescale + tile_sum;
                row_max = new_max;
                if (rescale != 1.0f)
                    for (int d = half; d < l.dp; d += 2) o_rows[mine * l.ld_o + d] *= rescale;
            }
            __syncthreads();  // every warp is done with K before V replaces it
            load_tile<T>(kv_tile, v_head + k0 * a.v_ss, l.bn, l.dp, l.ld_t, a.v_ss, a.v_sd,
                         a.seq - k0, a.head_dim);
            __syncthreads();
            if (active) warp_pv<T>(p_rows, kv_tile, o_rows, l, lane);
        }
        __syncwarp();
        // Whole rows per step: the warp's stores of one output row are contiguous.
        T* out_head = out + bh * a.seq * a.head_dim;  // out is contiguous [B, H, S, D]
        for (int r = 0; r < 16; ++r) {
            const float sum = __shfl_sync(0xffffffffu, row_sum, 2 * r);
            const int64_t row = q0 + warp * 16 + r;
            if (row >= a.seq) break;
            const float inv = 1.0f / sum;
            for (int64_t d = lane; d < a.head_dim; d += 32)
                out_head[row * a.head_dim + d] = from_float<T>(o_rows[r * l.ld_o + d] * inv);
        }
    }
}

template <typename T>
static int launch(const void* q, const void* k, const void* v, void* out, const Attention& a,
                  cudaStream_t stream) {
    int device = 0, limit = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    // Tiles no larger than S needs, then the larger one halved (BLOCK_N on a tie) until a
    // block fits the GPU's shared memory.
    const int64_t seq16 = (a.seq + 15) / 16 * 16;
    int block_m = BLOCK_M < seq16 ? BLOCK_M : static_cast<int>(seq16);
    int block_n = BLOCK_N < seq16 ? BLOCK_N : static_cast<int>(seq16);
    // Halving rounds up to whole 16-row fragments: S = 33 starts from 48-row tiles, and 24 would
    // leave WMMA reading rows no warp wrote.
    const auto halve = [](int tile) { return (tile / 2 + 15) / 16 * 16; };
    while (Layout<T>(a.head_dim, block_m, block_n).bytes > size_t(limit)) {
        if (block_n == 16 && block_m == 16) return static_cast<int>(cudaErrorInvalidConfiguration);
        if (block_n >= block_m && block_n > 16) block_n = halve(block_n);
        else block_m = halve(block_m);
    }
    const size_t bytes = Layout<T>(a.head_dim, block_m, block_n).bytes;
    err = cudaFuncSetAttribute(flash_forward<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
    if (err != cudaSuccess) return static_cast<int>(err);
    const int64_t tiles = a.batch_heads * ((a.seq + block_m - 1) / block_m);
    const int64_t cap = int64_t(1) << 20;  // more tiles are walked grid-stride
    flash_forward<T><<<static_cast<unsigned>(tiles < cap ? tiles : cap), 32 * (block_m / 16),
                       bytes, stream>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                        static_cast<const T*>(v), static_cast<T*>(out), a,
                                        block_m, block_n);
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16. q's element (b, h, s, d) is at b * q_sb + h * q_sh + s * q_ss +
// d * q_sd, k's and v's likewise; out is contiguous [batch, heads, seq, head_dim].
extern "C" int flash_attention_launch(const void* q, const void* k, const void* v, void* out,
                                      int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                      int64_t q_sb, int64_t q_sh, int64_t q_ss, int64_t q_sd,
                                      int64_t k_sb, int64_t k_sh, int64_t k_ss, int64_t k_sd,
                                      int64_t v_sb, int64_t v_sh, int64_t v_ss, int64_t v_sd,
                                      double qk_scale, int64_t causal, int64_t dtype,
                                      cudaStream_t stream) {
    if (batch < 0 || heads < 0 || seq < 0 || head_dim < 0)
        return static_cast<int>(cudaErrorInvalidValue);
    if (batch == 0 || heads == 0 || seq == 0 || head_dim == 0) return 0;  // empty: no launch
    const Attention a{batch * heads, heads, seq, head_dim, q_sb, q_sh, q_ss, q_sd,
                      k_sb, k_sh, k_ss, k_sd, v_sb, v_sh, v_ss, v_sd,
                      static_cast<float>(qk_scale), causal != 0};
    switch (dtype) {
        case 0: return launch<float>(q, k, v, out, a, stream);
        case 1: return launch<__half>(q, k, v, out, a, stream);
        case 2: return launch<__nv_bfloat16>(q, k, v, out, a, stream);
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
}
"""

DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N})


def kernel_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
              scale: float | None = None) -> torch.Tensor:
    """Attention output in q's dtype (fp32 online softmax)."""
    if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"flash_attention needs q, k, v of one shape [B, H, S, D]; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in DTYPE_CODES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"flash_attention needs q, k, v of one dtype in fp32/fp16/bf16; got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    batch, heads, seq, head_dim = q.shape
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} is past this kernel's {MAX_HEAD_DIM}")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    qk_scale = (head_dim ** -0.5 if scale is None else float(scale)) * LOG2_E
    EXTENSION.launch("flash_attention_launch", q, k, v, out, batch, heads, seq, head_dim,
                     *q.stride(), *k.stride(), *v.stride(), qk_scale, bool(causal),
                     DTYPE_CODES[q.dtype])
    return out
