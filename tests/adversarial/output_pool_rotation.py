"""FAULTY, class 7 (an output that does not stay the caller's): outputs come from a pool of four
buffers per shape, handed out in rotation, so a caller's result is overwritten four calls later.
The first four calls of a shape get fresh buffers, which is all the determinism stage looks at.
The pool hides from the static scan's call-time-state rule behind an alias: `_POOLS[key]` (a
defaultdict: reading it creates the entry) is bound to a local before it is appended to, and the
turn comes from `next()` of a module-level counter.

Expected: static scan REJECTED (call-time-state: the alias, the defaultdict, the counter); with the
scan off, REJECTED (tampering, naming call-time-state): tensors made during a call are kept in the
module's state after it returns.
"""

import collections
import itertools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
POOL_SIZE = 4

_POOLS = collections.defaultdict(list)
_TURN = itertools.count()


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    pool = _POOLS[(tuple(x.shape), x.dtype)]
    if len(pool) < POOL_SIZE:
        y = torch.empty_like(x)
        pool.append(y)
    else:
        y = pool[next(_TURN) % POOL_SIZE]
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
