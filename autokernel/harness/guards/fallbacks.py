"""`FallbackRecorder`: every op the candidate runs outside its Triton launches, and poison in
the memory it allocates."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import Self

from autokernel.harness.guards.host_reads import HostReadGuard
from autokernel.harness.guards.host_writes import HostWriteLedger
from autokernel.harness.guards.launches import LaunchMonitor
from autokernel.harness.guards.ops import (
    _DUMP_TABLE, ALLOWED_ATEN_OPS, DEVICE_CHECKED_OPS, POISONED_ALLOCATIONS, TRITON_LAUNCH_OPS,
    allowed_op_tables,
)

if TYPE_CHECKING:
    from autokernel.harness.guards.poison import PoisonFiller

class FallbackRecorder(TorchDispatchMode):
    """Records ops that the candidate runs itself, outside Triton's launch machinery, and
    poisons the uninitialised memory it allocates. While it records, host reads of tensor
    values raise (`HostReadGuard`), unless `guard_host_reads` is off: in timed calls too, where it
    adds host time only (the timing protocol keeps the host ahead of the device)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in a dynamo-disable that imports torch._dynamo on first
        # use (seconds of imports per worker); this mode never runs under torch.compile.
        return False

    def __init__(self, monitor: LaunchMonitor, device: torch.device) -> None:
        super().__init__()
        self.monitor = monitor
        self.device = device
        self._ops: list[str] = []
        self._verified: set[str] = set()
        # Off while timing: a fill inside the call would add device time to the candidate's
        # figure (the timed rounds check outputs by audits instead).
        self.poison_allocations = True
        self.filler: PoisonFiller | None = None  # the job's poison, once the judge has sent it
        self.guard_host_reads = True
        self._host_guard: HostReadGuard | None = None
        # Taken now, before the candidate exists: the ops it may use, as torch defined them.
        self.known_ops, self.kernel_tables = allowed_op_tables()

    @property
    def violations(self) -> list[str]:
        """Everything refused since the last reset: ops, host reads, launch hooks."""
        return self._ops + self.monitor.findings

    def reset(self) -> None:
        self._ops = []
        self._verified = set()
        self.monitor.findings.clear()

    def __enter__(self) -> Self:
        super().__enter__()
        # A correctness call on the CPU (allocations poisoned, launches run): raw host writes.
        if self.device.type == "cpu" and self.poison_allocations and not self.monitor.ghost:
            self.monitor.ledger = HostWriteLedger()
        if self.guard_host_reads:
            self._host_guard = HostReadGuard(self.monitor, self._ops)
            self._host_guard.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        guard, self._host_guard = self._host_guard, None
        ledger, self.monitor.ledger = self.monitor.ledger, None
        if ledger is not None:
            ledger.close()
            self._ops.extend(ledger.findings)
        try:
            if guard is not None:
                guard.__exit__(*exc)
        finally:
            super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        ledger = None if self.monitor.in_launch else self.monitor.ledger
        if ledger is not None:
            ledger.check((args, kwargs), f"torch's {func}")
        result = func(*args, **kwargs)
        packet = getattr(func, "overloadpacket", None)
        name = getattr(packet, "__name__", str(func))
        aten = getattr(func, "namespace", None) == "aten"
        label = str(func).removeprefix("aten.")
        if self.monitor.in_launch and self.monitor.launch_origin_is_triton(sys._getframe(1)):
            if not (aten and name in TRITON_LAUNCH_OPS):
                self._ops.append(f"{label} (inside a Triton launch: code run by a launch hook)")
            return result
        if self.poison_allocations and self.filler is not None \
                and name in POISONED_ALLOCATIONS and isinstance(result, torch.Tensor):
            self.filler.storage(result)
        if ledger is not None:
            ledger.note((args, kwargs, result))
        qualified = func.name() if callable(getattr(func, "name", None)) else label
        if not aten or qualified not in self.known_ops:
            self._ops.append(f"{qualified} (not one of torch's own aten ops: an op defined by "
                             "kernel.py)")
        elif name not in ALLOWED_ATEN_OPS:
            self._ops.append(label)
        elif qualified not in self._verified:
            self._verified.add(qualified)
            if _DUMP_TABLE(qualified) != self.kernel_tables.get(qualified):
                self._ops.append(f"{label} (its kernel was re-registered after kernel.py was "
                                 "imported)")
        if aten and name in ALLOWED_ATEN_OPS and self._off_device(name, args, kwargs, result):
            self._ops.append(f"{label} (device transfer)" if name in DEVICE_CHECKED_OPS
                             else f"{label} (a tensor off the harness's {self.device.type} device)")
        return result

    def _off_device(self, name: str, args: Any, kwargs: dict[str, Any], result: Any) -> bool:
        """Copies may not move data between devices, and on a GPU nothing may be made in host
        memory (a pinned buffer is reachable from both sides: host compute behind a copy)."""
        if name not in DEVICE_CHECKED_OPS and self.device.type != "cuda":
            return False
        tensors = [a for a in (*args, *kwargs.values(), result) if isinstance(a, torch.Tensor)]
        return any(t.device.type != self.device.type for t in tensors)
