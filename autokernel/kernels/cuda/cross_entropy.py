"""Cross-entropy, in CUDA C++: the float32 mean over rows of logsumexp(logits[i, :]) -
logits[i, targets[i]], for logits [M, V] and int64 targets [M]; rows whose target is -100 are
left out of both the sum and the count (NaN when every row is, as torch's 0/0).

Algorithm: kernel 1 runs one block of BLOCK_THREADS threads per row (rows grid-stride). Each
thread keeps an online (max, sum of exp(x - max)) pair over its share of the row, so every logit
is read once, in one pass; the pairs are merged with warp shuffles and one shared-memory step.
A -inf logit adds nothing (never exp(-inf - (-inf)) = NaN), so rows with masked vocabulary stay
finite. Math is float32 (expf/logf, not the fast intrinsics). The target's logit is one
bounds-checked scalar load; the row's loss (0 for an ignored row) goes to a float32 buffer.
Kernel 2, one block, adds the row losses and counts the kept rows in a fixed order (double
accumulation, no atomics: the same input gives the same bits), then divides. Rows with unit
vocabulary stride and a 16-byte aligned start use 16-byte vector loads with a scalar tail.

Limits: a row is one block (short vocabularies leave threads idle); kernel 2 is one block, so
its cost grows with M (fine for the M of a batch of tokens). A target outside [0, V) that is not
-100 is never loaded: its row's loss is NaN, so the mean is NaN (torch raises instead; a kernel
cannot raise without a host sync). Every load and store is bounds-checked; logits fp32, fp16 or
bf16; int64 indexing throughout.
"""

import torch

from autokernel.cuda.runtime import load_extension

KERNEL_TYPE = "cross_entropy"
BACKEND = "cuda"

BLOCK_THREADS = 256
VECTORIZE = True
MEAN_THREADS = 1024
TUNABLE_SPACE = {"BLOCK_THREADS": [128, 256, 512, 1024], "VECTORIZE": [True, False],
                 "MEAN_THREADS": [256, 512, 1024]}

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VECTORIZE
#define VECTORIZE 1
#endif
#ifndef MEAN_THREADS
#define MEAN_THREADS 1024
#endif
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS: warps, <= 1024");
static_assert(MEAN_THREADS % 32 == 0 && MEAN_THREADS <= 1024, "MEAN_THREADS: warps, <= 1024");

#define IGNORE_INDEX (-100)

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Online logsumexp state: `sum` is the sum of exp(x - max) over the values seen.
struct MaxSum {
    float max;
    float sum;
};

__device__ __forceinline__ void add_value(MaxSum& state, float x) {
    if (x > state.max) {  // also the first finite value: exp(-inf) = 0 scales the empty sum
        state.sum = state.sum * expf(state.max - x) + 1.0f;
        state.max = x;
    } else if (x != -INFINITY) {  // -inf adds exp(-inf) = 0; never exp(-inf - (-inf))
        state.sum += expf(x - state.max);
    }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float top = fmaxf(a.max, b.max);
    if (top == -INFINITY) return {top, 0.0f};  // both empty or all -inf
    return {top, a.sum * expf(a.max - top) + b.sum * expf(b.max - top)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum state) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other;
        other.max = __shfl_xor_sync(0xffffffffu, state.max, offset);
        other.sum = __shfl_xor_sync(0xffffffffu, state.sum, offset);
        state = merge(state, other);
    }
    return state;
}

// The block's merged state, returned to every thread.
__device__ MaxSum block_merge(MaxSum state) {
    __shared__ MaxSum warp_states[BLOCK_THREADS / 32];
    __shared__ MaxSum total;
    state = warp_merge(state);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_states[warp] = state;
    __syncthreads();
    if (warp == 0) {
        MaxSum value = lane < BLOCK_THREADS / 32 ? warp_states[lane] : MaxSum{-INFINITY, 0.0f};
        value = warp_merge(value);
        if (lane == 0) total = value;
    }
    __syncthreads();
    const MaxSum result = total;
    __syncthreads();  // warp_states and total are reused by the next row
    return result;
}

template <typename T>
__global__ void __launch_bounds__(BLOCK_THREADS) row_losses(
        const T* __restrict__ logits, const int64_t* __restrict__ targets,
        float* __restrict__ losses, int64_t n_rows, int64_t n_vocab, int64_t stride_m,
        int64_t stride_v) {
    constexpr int VEC = 16 / sizeof(T);
    for (int64_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const int64_t target = targets[row];
        if (target == IGNORE_INDEX) {  // uniform across the block: no thread reaches a barrier
            if (threadIdx.x == 0) losses[row] = 0.0f;
            continue;
        }
        const T* row_x = logits + row * stride_m;
        const bool vector_ok = VECTORIZE && stride_v == 1 &&
                               reinterpret_cast<uintptr_t>(row_x) % 16 == 0;
        const int64_t n_vec = vector_ok ? n_vocab / VEC : 0;  // chunk c: [c*VEC, c*VEC+VEC)
        MaxSum state{-INFINITY, 0.0f};
        for (int64_t c = threadIdx.x; c < n_vec; c += BLOCK_THREADS) {
            const uint4 raw = reinterpret_cast<const uint4*>(row_x)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) add_value(state, to_float(values[i]));
        }
        for (int64_t j = n_vec * VEC + threadIdx.x; j < n_vocab; j += BLOCK_THREADS)
            add_value(state, to_float(row_x[j * stride_v]));
        state = block_merge(state);
        if (threadIdx.x == 0) {
            float loss = NAN;  // an out-of-range target is never loaded
            if (target >= 0 && target < n_vocab)
                loss = (state.max + logf(state.sum)) - to_float(row_x[target * stride_v]);
            losses[row] = loss;
        }
    }
}

// One block: out[0] = sum(losses) / count(targets != IGNORE_INDEX), in a fixed order.
__global__ void __launch_bounds__(MEAN_THREADS) mean_loss(
        const float* __restrict__ losses, const int64_t* __restrict__ targets,
        float* __restrict__ out, int64_t n_rows) {
    __shared__ double warp_sums[MEAN_THREADS / 32];
    __shared__ long long warp_counts[MEAN_THREADS / 32];
    double sum = 0.0;
    long long count = 0;
    for (int64_t row = threadIdx.x; row < n_rows; row += MEAN_THREADS) {
        if (targets[row] != IGNORE_INDEX) {
            sum += static_cast<double>(losses[row]);
            ++count;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        count += __shfl_xor_sync(0xffffffffu, count, offset);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        warp_sums[warp] = sum;
        warp_counts[warp] = count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        long long kept = 0;
        for (int w = 0; w < MEAN_THREADS / 32; ++w) {
            total += warp_sums[w];
            kept += warp_counts[w];
        }
        out[0] = static_cast<float>(total / static_cast<double>(kept));  // 0/0: NaN, as torch
    }
}

template <typename T>
static int launch(const void* logits, const void* targets, void* losses, void* out,
                  int64_t n_rows, int64_t n_vocab, int64_t stride_m, int64_t stride_v,
                  cudaStream_t stream) {
    const unsigned blocks = static_cast<unsigned>(n_rows < (1 << 20) ? n_rows : (1 << 20));
    row_losses<T><<<blocks, BLOCK_THREADS, 0, stream>>>(
        static_cast<const T*>(logits), static_cast<const int64_t*>(targets),
        static_cast<float*>(losses), n_rows, n_vocab, stride_m, stride_v);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return static_cast<int>(error);
    mean_loss<<<1, MEAN_THREADS, 0, stream>>>(static_cast<const float*>(losses),
                                              static_cast<const int64_t*>(targets),
                                              static_cast<float*>(out), n_rows);
    return static_cast<int>(cudaGetLastError());
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (logits). targets: contiguous int64 [n_rows]; losses: float32
// scratch [n_rows]; out: one float32. logits' element (i, j) is at i * stride_m + j * stride_v.
extern "C" int cross_entropy_launch(const void* logits, const void* targets, void* losses,
                                    void* out, int64_t n_rows, int64_t n_vocab, int64_t stride_m,
                                    int64_t stride_v, int64_t dtype, cudaStream_t stream) {
    if (n_rows <= 0 || n_vocab <= 0) return static_cast<int>(cudaErrorInvalidValue);
#define ARGS logits, targets, losses, out, n_rows, n_vocab, stride_m, stride_v, stream
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
EXTENSION = load_extension(CUDA_SOURCE, {"BLOCK_THREADS": BLOCK_THREADS, "VECTORIZE": VECTORIZE,
                                         "MEAN_THREADS": MEAN_THREADS})


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if logits.ndim != 2 or targets.ndim != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(f"expected logits [M, V] and targets [M]; got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    if logits.dtype not in DTYPE_CODES:
        raise TypeError(f"cross_entropy supports fp32, fp16 and bf16 logits, not {logits.dtype}")
    n_rows, n_vocab = logits.shape
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    if n_rows == 0:
        return out.fill_(float("nan"))  # the mean of no rows, as torch
    if n_vocab == 0:
        raise ValueError("cross_entropy needs at least one class")
    targets = targets.to(torch.int64).contiguous()
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    EXTENSION.launch("cross_entropy_launch", logits, targets, losses, out, n_rows, n_vocab,
                     *logits.stride(), DTYPE_CODES[logits.dtype])
    return out
