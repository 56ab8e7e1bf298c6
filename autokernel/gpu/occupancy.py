"""What one SM of an NVIDIA architecture holds, and the theoretical occupancy of a launch on it.

The limits are CUDA's per-compute-capability figures (the CUDA C++ Programming Guide's table of
technical specifications): registers, shared memory, resident threads, warps and blocks per SM.
Occupancy here is THEORETICAL: how many blocks of a kernel fit on one SM at once given its
registers per thread, shared memory per block and warps per block, the way the CUDA occupancy
calculator counts it (registers allocated per warp in units of 256, shared memory in units of
128 bytes plus 1 KiB the system reserves per block). Achieved occupancy needs a profiler.

A launch's waves are its blocks divided by what the whole GPU holds at once (SMs x blocks per
SM): 0.3 waves leaves most SMs idle; 1.1 waves runs a nearly empty second wave (a tail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WARP_SIZE = 32
REGISTER_ALLOCATION_UNIT = 256  # registers per warp are allocated in multiples of this
SHARED_ALLOCATION_UNIT = 128  # bytes


@dataclass(frozen=True)
class SMLimits:
    registers: int  # 32-bit registers per SM
    max_registers_per_thread: int
    shared_bytes: int  # shared memory per SM usable by blocks
    max_shared_per_block: int  # the opt-in maximum of one block
    reserved_shared_per_block: int  # what the system takes from each resident block
    max_threads: int  # resident threads per SM
    max_blocks: int  # resident blocks per SM

    @property
    def max_warps(self) -> int:
        return self.max_threads // WARP_SIZE


_KIB = 1024
SM_LIMITS: dict[tuple[int, int], SMLimits] = {
    (7, 0): SMLimits(65536, 255, 96 * _KIB, 96 * _KIB, 0, 2048, 32),      # V100
    (7, 5): SMLimits(65536, 255, 64 * _KIB, 64 * _KIB, 0, 1024, 16),      # Turing
    (8, 0): SMLimits(65536, 255, 164 * _KIB, 163 * _KIB, _KIB, 2048, 32),  # A100
    (8, 6): SMLimits(65536, 255, 100 * _KIB, 99 * _KIB, _KIB, 1536, 16),   # GA10x
    (8, 7): SMLimits(65536, 255, 164 * _KIB, 163 * _KIB, _KIB, 1536, 16),  # Orin
    (8, 9): SMLimits(65536, 255, 100 * _KIB, 99 * _KIB, _KIB, 1536, 24),   # Ada
    (9, 0): SMLimits(65536, 255, 228 * _KIB, 227 * _KIB, _KIB, 2048, 32),  # Hopper
    (10, 0): SMLimits(65536, 255, 228 * _KIB, 227 * _KIB, _KIB, 2048, 32),  # Blackwell DC
    (12, 0): SMLimits(65536, 255, 100 * _KIB, 99 * _KIB, _KIB, 1536, 32),  # Blackwell GeForce
}


def sm_limits(compute_capability: tuple[int, int] | None) -> SMLimits | None:
    """The limits of an architecture (the nearest lower minor version of the same major), or
    None where it is unknown (AMD, or an architecture newer than the table)."""
    if compute_capability is None:
        return None
    cc = tuple(compute_capability)
    if cc in SM_LIMITS:
        return SM_LIMITS[cc]  # type: ignore[index]
    same_major = [k for k in SM_LIMITS if k[0] == cc[0] and k[1] <= cc[1]]
    return SM_LIMITS[max(same_major)] if same_major else None


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int  # 0: one block does not fit (the launch would fail)
    warps_per_sm: int
    percent: float  # resident warps / the SM's maximum warps
    limiter: str  # "warps", "blocks", "registers" or "shared memory"


def occupancy(limits: SMLimits, num_warps: int, registers_per_thread: int | None,
              shared_bytes: int | None) -> Occupancy:
    """Theoretical blocks per SM of a launch (see the module docstring for the rules)."""
    num_warps = max(1, num_warps)
    bounds = {"warps": limits.max_warps // num_warps, "blocks": limits.max_blocks}
    if registers_per_thread:
        per_warp = math.ceil(registers_per_thread * WARP_SIZE / REGISTER_ALLOCATION_UNIT)
        per_warp *= REGISTER_ALLOCATION_UNIT
        fits = registers_per_thread <= limits.max_registers_per_thread
        bounds["registers"] = (limits.registers // per_warp) // num_warps if fits else 0
    if shared_bytes is not None:
        per_block = shared_bytes + limits.reserved_shared_per_block
        per_block = math.ceil(per_block / SHARED_ALLOCATION_UNIT) * SHARED_ALLOCATION_UNIT
        fits = shared_bytes <= limits.max_shared_per_block
        bounds["shared memory"] = limits.shared_bytes // per_block if fits else 0
    limiter = min(bounds, key=lambda name: bounds[name])  # first listed wins a tie
    blocks = bounds[limiter]
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * num_warps,
                     percent=100.0 * blocks * num_warps / limits.max_warps, limiter=limiter)


def waves(grid_blocks: int, sms: int, blocks_per_sm: int) -> float | None:
    """Grid blocks / (SMs x blocks per SM); None when a block does not fit at all."""
    if sms <= 0 or blocks_per_sm <= 0:
        return None
    return grid_blocks / (sms * blocks_per_sm)
