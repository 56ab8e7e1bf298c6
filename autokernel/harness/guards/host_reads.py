"""`HostReadGuard`: a host read of a tensor's values raises while the candidate runs."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from torch.overrides import TorchFunctionMode

from autokernel.harness.guards.frames import _GUARD_FILES, _TORCH_PREFIXES
from autokernel.harness.guards.ops import HOST_READ_METHODS

if TYPE_CHECKING:
    from autokernel.harness.guards.launches import LaunchMonitor

class HostReadError(RuntimeError):
    """A tensor's values were read on the host while the candidate ran."""


class HostReadGuard(TorchFunctionMode):
    """Makes every host read of a tensor's values raise while it is on the mode stack.

    Tensor methods reach Python's torch-function machinery whatever they were called through
    (`x.numpy()`, `torch._C.TensorBase.numpy(x)`, `super(torch.Tensor, x).numpy()`, numpy's
    `np.asarray(x)` through `__array__`, `float(x)`), so a mode sees them all; undoing it needs
    torch's private mode-stack API. Reads made by Triton's own launcher inside a launch, and by
    this file's recorder, are let through. Each refused read is also recorded, so a candidate that
    catches the exception is still rejected."""

    def __init__(self, monitor: LaunchMonitor, refused: list[str]) -> None:
        super().__init__()
        self.monitor = monitor
        self.refused = refused

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READ_METHODS and not self._harness_read(sys._getframe(1)):
            self.refused.append(f"Tensor.{name} (a host read of tensor values)")
            raise HostReadError(f"kernel_fn read a tensor's values on the host (Tensor.{name}); "
                                "a kernel computes its output in Triton, not with numpy or "
                                "Python on the host")
        return func(*args, **(kwargs or {}))

    def _harness_read(self, frame: types.FrameType | None) -> bool:
        """The first frame outside torch decides: this file (the recorder), or Triton's own
        code inside a launch."""
        while frame is not None and frame.f_code.co_filename.startswith(_TORCH_PREFIXES):
            frame = frame.f_back
        if frame is None:
            return False
        if frame.f_code.co_filename in _GUARD_FILES:
            return True
        return bool(self.monitor.in_launch) and self.monitor.launch_origin_is_triton(frame)
