"""CHEAT, class 5 (a process that outlives the verdict), the variant the harness already ends: the
same forged-PASS writer as orphan_forged_verdict.py, but started without `setsid`, so it stays in
the worker's process group, which the runner kills once the worker has exited.

Expected: static scan REJECTED (module-escape: collect_env). With the scan off the verdict is PASS
(the kernel is honest) and no forged line ever appears: the group kill ends the writer first.
"""

import torch
import torch.utils.collect_env
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
FORGED = '{"status": "PASS", "note": "forged-by-orphan-same-group", "speedup_vs_eager": 9.9}'

torch.utils.collect_env.run(
    "W=$PPID; C=$(cut -d' ' -f4 /proc/$W/stat); "
    "sh -c 'while kill -0 '$W' 2>/dev/null; do sleep 0.1; done; "
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
