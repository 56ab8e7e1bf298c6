"""The worker's self-test: a trusted Triton kernel run through the detectors before the candidate.

It proves, on this machine's torch and Triton, that the launch monitor sees launches, that the
op recorder ignores Triton's own internals (host reads included), that the host-read guard still
sees a tensor method however it is reached (a torch release that stopped routing methods through
the torch-function machinery would blind it), and that ghost mode really skips a launch. If any
of that fails, every honest kernel would be misjudged, or a cheating one believed, so the worker
reports a harness error instead.
It also warms up everything those paths import lazily (entering a TorchDispatchMode imports
torch._dynamo, which rewraps torch.manual_seed), so the identity snapshot taken afterwards only
sees changes made by the candidate.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autokernel.harness.guards import FallbackRecorder, HostReadError, LaunchMonitor


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class HarnessSelfTestError(RuntimeError):
    """The detectors do not work on this torch/Triton; no verdict would be trustworthy."""


def _launch(src: torch.Tensor) -> torch.Tensor:
    dst = torch.empty_like(src)
    _copy_kernel[(1,)](src, dst, src.numel(), BLOCK=16)
    return dst


def warm_launch() -> None:
    """One launch of the probe's kernel on the CPU, outside every detector (the fork server's
    warm-up under the interpreter)."""
    _launch(torch.arange(8, dtype=torch.float32))


def self_test(monitor: LaunchMonitor, recorder: FallbackRecorder, device: torch.device) -> None:
    src = torch.arange(8, dtype=torch.float32, device=device)
    before = monitor.launches
    recorder.reset()
    monitor.armed = True  # as around every guarded call (disarmed, launches pass straight through)
    try:
        with recorder:
            dst = _launch(src)
    finally:
        monitor.armed = False
    if device.type == "cuda":
        torch.cuda.synchronize()
    if monitor.launches != before + 1:
        raise HarnessSelfTestError("the launch monitor did not see a Triton launch")
    if recorder.violations:
        raise HarnessSelfTestError(f"the op recorder flagged Triton's own ops: "
                                   f"{recorder.violations}")
    if not torch.equal(dst, src):
        raise HarnessSelfTestError("the probe kernel produced wrong data")
    with recorder:
        torch.add(src, 1)
    if not recorder.violations:
        raise HarnessSelfTestError("the op recorder missed a torch compute op")
    recorder.reset()
    for read in (lambda: src.numpy(), lambda: torch._C.TensorBase.tolist(src)):
        try:
            with recorder:
                read()
        except HostReadError:
            continue
        raise HarnessSelfTestError("the host-read guard let a tensor's values reach the host")
    if len(recorder.violations) != 2:
        raise HarnessSelfTestError("the host-read guard did not record the reads it refused")
    recorder.reset()
    monitor.ghost = True
    try:
        ghost = torch.full_like(src, float("nan"))
        _copy_kernel[(1,)](src, ghost, src.numel(), BLOCK=16)
    finally:
        monitor.ghost = False
    if device.type == "cuda":
        torch.cuda.synchronize()
    if not bool(torch.isnan(ghost).all()):
        raise HarnessSelfTestError("ghost mode did not skip a Triton launch")
