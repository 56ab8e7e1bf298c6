"""Per-kernel resource usage from ptxas's `-v` report (registers, spills, shared memory).

ptxas prints, for each entry function it compiles:

    ptxas info    : Compiling entry function '_Z11reduce_rowsIfEvPKT_PS0_ll' for 'sm_90a'
    ptxas info    : Function properties for _Z11reduce_rowsIfEvPKT_PS0_ll
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 18 registers, used 1 barriers, 128 bytes smem, 400 bytes cmem[0]
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from autokernel.gpu.occupancy import SM_LIMITS

MAX_REGISTERS_PER_THREAD = 255


@dataclass
class KernelResources:
    kernel: str  # demangled when cu++filt is at hand
    arch: str
    registers: int | None = None
    shared_bytes: int = 0  # static shared memory (dynamic shared memory is a launch argument)
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def line(self) -> str:
        spill = (f"spills {self.spill_store_bytes} B stored / {self.spill_load_bytes} B loaded"
                 if self.spills else "no spills")
        return (f"{self.kernel} [{self.arch}]: {self.registers} registers, {self.shared_bytes} B "
                f"static shared memory, {self.stack_bytes} B stack, {spill}")


def parse_ptxas_log(log: str) -> list[KernelResources]:
    """One entry per compiled entry function, in ptxas's order."""
    found: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in log.splitlines():
        if match := re.search(r"Compiling entry function '([^']+)' for '([^']+)'", line):
            current = found.setdefault(match.group(1), KernelResources(match.group(1),
                                                                       match.group(2)))
        elif match := re.search(r"Function properties for (\S+)", line):
            current = found.get(match.group(1), current)
        elif current is not None and (match := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                line)):
            current.stack_bytes, current.spill_store_bytes, current.spill_load_bytes = (
                int(match.group(1)), int(match.group(2)), int(match.group(3)))
        elif current is not None and (match := re.search(r"Used (\d+) registers", line)):
            current.registers = int(match.group(1))
            if smem := re.search(r"(\d+) bytes smem", line):
                current.shared_bytes = int(smem.group(1))
    kernels = list(found.values())
    names = _demangle([k.kernel for k in kernels])
    for kernel, name in zip(kernels, names):
        kernel.kernel = name
    return kernels


def _demangle(names: list[str]) -> list[str]:
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not names or tool is None:
        return names
    try:
        done = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return names
    demangled = done.stdout.splitlines()
    return demangled if done.returncode == 0 and len(demangled) == len(names) else names


def limit_warnings(kernel: KernelResources, capability: tuple[int, int] = (9, 0)) -> list[str]:
    """What would stop or slow a launch on that GPU: spills, over-limit static shared memory."""
    warnings = []
    if kernel.spills:
        warnings.append(f"{kernel.kernel}: register spills ({kernel.spill_store_bytes} B stored)")
    limits = SM_LIMITS.get(capability)
    if limits is not None and kernel.shared_bytes > limits.max_shared_per_block:
        warnings.append(f"{kernel.kernel}: {kernel.shared_bytes} B static shared memory exceeds "
                        f"the {limits.max_shared_per_block} B a block may have")
    return warnings
