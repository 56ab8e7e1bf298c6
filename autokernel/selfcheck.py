"""A tiny Triton kernel that `autokernel doctor` runs in a subprocess to prove the toolchain works.

    TRITON_INTERPRET=1 python -m autokernel.selfcheck interpreter   # run it, compare to torch
    python -m autokernel.selfcheck aot           # compile it for Hopper (autokernel.aot)

Each prints one JSON object {"ok": bool, "detail": str} and exits 0 when ok. A subprocess, because
the interpreter must be chosen before Triton decorates a kernel, and because a toolchain crash
(a segfault in the interpreter or the compiler) must not take the doctor down with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

PROBE_SIZE = 1000  # not a multiple of the block: the mask path is exercised
PROBE_BLOCK = 256


@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=in_bounds).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=in_bounds).to(tl.float32)
    tl.store(out_ptr + offsets, (x * alpha + y).to(out_ptr.dtype.element_ty), mask=in_bounds)


def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), PROBE_BLOCK),)
    _scaled_add_kernel[grid](x, y, out, x.numel(), alpha, BLOCK=PROBE_BLOCK, num_warps=4)
    return out


def probe_inputs() -> tuple[torch.Tensor, torch.Tensor, float]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_SIZE, generator=generator)
    y = torch.randn(PROBE_SIZE, generator=generator)
    return x, y, 1.5


def check_interpreter() -> dict[str, object]:
    if not triton.knobs.runtime.interpret:
        return {"ok": False, "detail": "TRITON_INTERPRET=1 was not set for this process"}
    x, y, alpha = probe_inputs()
    out = scaled_add(x, y, alpha)
    error = (out - (x * alpha + y)).abs().max().item()
    ok = error <= 1e-6
    return {"ok": ok, "detail": f"{PROBE_SIZE}-element scaled add, max abs error {error:.1e}"}


def check_aot() -> dict[str, object]:
    from autokernel.aot import check_file

    results = check_file(Path(__file__), "scaled_add", [(f"fp32 {PROBE_SIZE}", probe_inputs())])
    if not all(r.ok for r in results):
        return {"ok": False, "detail": "; ".join(f"{r.kernel}: {r.error}" for r in results)}
    r = results[0]
    return {"ok": True, "detail": f"{r.kernel} compiled for sm_90: {r.n_regs} registers, "
                                  f"{r.shared_bytes} B shared"}


def main(argv: list[str]) -> int:
    checks = {"interpreter": check_interpreter, "aot": check_aot}
    if len(argv) != 1 or argv[0] not in checks:
        print(f"usage: python -m autokernel.selfcheck {{{'|'.join(checks)}}}", file=sys.stderr)
        return 2
    try:
        outcome = checks[argv[0]]()
    except Exception as exc:
        outcome = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(outcome))
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
