"""CHEAT, class 5 (a process that outlives the verdict): at import, a shell (through
`torch.utils.collect_env.run`) starts a `setsid` child, outside the worker's process group, that
waits for the worker to exit and then appends a forged PASS line to the standard output of the
process that started the harness, through /proc/<pid>/fd/1: after the real verdict, where a
reader of "the last line is the JSON" takes it. The kernel itself is an honest softmax.

Expected: static scan REJECTED (module-escape: collect_env). With the scan off the verdict is PASS
and the forged line appears afterwards today (listed as pending: the OS sandbox refuses setsid and
exec, the spawner kills the whole tree, and the verdict travels in a file).
"""

import torch
import torch.utils.collect_env
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
FORGED = '{"status": "PASS", "note": "forged-by-orphan-setsid", "speedup_vs_eager": 9.9}'

torch.utils.collect_env.run(
    "W=$PPID; C=$(cut -d' ' -f4 /proc/$W/stat); "
    "setsid sh -c 'while kill -0 '$W' 2>/dev/null; do sleep 0.1; done; "
    "sleep 0.5; echo \"$0\" >> /proc/'$C'/fd/1' '" + FORGED + "' "
    "</dev/null >/dev/null 2>&1 &"
)


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
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
