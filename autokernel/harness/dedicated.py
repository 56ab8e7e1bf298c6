"""Device memory the judge shares with a candidate process, one driver allocation per tensor.

CUDA IPC maps a whole allocation into the receiving process. torch's caching allocator carves
many tensors out of one segment (2 MiB and up), so handing a candidate one small input through
torch's own IPC path maps the judge's whole segment, reference tensors included (seen on an
H200: the candidate found the judge's reference in the mapping and overwrote it). Everything the
judge shares therefore lives in an allocation of its own, made with the driver's `cuMemAlloc`
(never the caching allocator's), rounded up to 2 MiB pages so that nothing else shares its
pages, and holding nothing but that tensor. The handle the candidate receives opens that
allocation and no other memory of the judge's.

Both sides go through the CUDA driver API (libcuda) with ctypes, in the current (primary)
context torch uses: `DedicatedBuffer` on the judge's side, `open_dedicated` on the candidate's.
A tensor over such memory is made through `__cuda_array_interface__` as raw bytes, then viewed
with the dtype, size, stride and storage offset wanted.

A tensor's storage may begin `base_bytes` into its allocation (a multiple of `BASE_ALIGN_BYTES`,
drawn by the judge per hand-over): the candidate's mapping of an allocation of a given size tends
to land at the same virtual address call after call, and a kernel that counts the distinct
addresses it is given (to misbehave only after a production run's worth) would otherwise never
see a new one in the judge's calls. The base moves the storage's first byte; the tensor's own
storage offset is the judge's, unchanged.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

IPC_HANDLE_BYTES = 64
PAGE_BYTES = 2 * 2**20
BASE_ALIGN_BYTES = 512  # torch's caching allocator aligns blocks to 512 bytes: no new tell
BASE_SLOTS = 256  # bases 0 .. 255 x 512 bytes: two hand-overs share one about 1 time in 256
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class DedicatedMemoryError(RuntimeError):
    """The driver refused an allocation, an export or an import."""


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


def handle_bytes(handle: _IpcHandle) -> bytes:
    """The handle's whole 64 bytes. (Its c_char array field reads as bytes cut at the first
    NUL, and handles hold zeros: such a cut handle never opened.)"""
    return ctypes.string_at(ctypes.addressof(handle), IPC_HANDLE_BYTES)


def ipc_handle(raw: bytes) -> _IpcHandle:
    """The driver's handle structure holding these 64 bytes."""
    if len(raw) != IPC_HANDLE_BYTES:
        raise DedicatedMemoryError("a memory handle of the wrong size")
    handle = _IpcHandle()
    ctypes.memmove(ctypes.addressof(handle), raw, IPC_HANDLE_BYTES)
    return handle


@functools.cache
def _driver() -> Any:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise DedicatedMemoryError("the CUDA driver library (libcuda) cannot be loaded")


def _check(result: int, what: str) -> None:
    if result != 0:
        raise DedicatedMemoryError(f"{what} failed with CUDA driver error {result}")


def rounded(nbytes: int) -> int:
    """`nbytes` rounded up to whole 2 MiB pages (at least one)."""
    return max(1, -(-nbytes // PAGE_BYTES)) * PAGE_BYTES


class _Interface:
    """A raw byte range of device memory as numba/cupy-style `__cuda_array_interface__`."""

    def __init__(self, pointer: int, nbytes: int, owner: Any) -> None:
        self.owner = owner  # the buffer outlives every tensor made over it
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (pointer, False), "version": 3,
                                         "strides": None, "stream": None}


def _view(pointer: int, nbytes: int, owner: Any, dtype: torch.dtype, size: list[int],
          stride: list[int], offset: int, device: torch.device,
          base_bytes: int = 0) -> torch.Tensor:
    if base_bytes % BASE_ALIGN_BYTES or not 0 <= base_bytes < nbytes:
        raise DedicatedMemoryError(f"a storage base of {base_bytes} bytes in an allocation of "
                                   f"{nbytes}")
    pointer, nbytes = pointer + base_bytes, nbytes - base_bytes
    raw = torch.as_tensor(_Interface(pointer, nbytes, owner), device=device)
    element = torch.empty((), dtype=dtype).element_size()
    usable = raw[: nbytes - nbytes % element].view(dtype)
    return usable.as_strided(size, stride, offset)


class DedicatedBuffer:
    """One `cuMemAlloc` of the judge's, exportable by handle; `free` releases it."""

    def __init__(self, nbytes: int, device: torch.device) -> None:
        torch.cuda.init()
        torch.cuda.set_device(device)
        torch.cuda.current_stream(device)  # the primary context is current on this thread
        self.device = device
        self.nbytes = rounded(nbytes)
        pointer = ctypes.c_uint64()
        _check(_driver().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(self.nbytes)),
               f"cuMemAlloc of {self.nbytes} bytes")
        self.pointer = pointer.value
        handle = _IpcHandle()
        _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(self.pointer)),
               "cuIpcGetMemHandle")
        self.handle = handle_bytes(handle)
        self.freed = False

    def tensor(self, dtype: torch.dtype, size: list[int], stride: list[int],
               offset: int = 0, base_bytes: int = 0) -> torch.Tensor:
        return _view(self.pointer, self.nbytes, self, dtype, size, stride, offset, self.device,
                     base_bytes)

    def free(self) -> None:
        """Release the allocation (after the candidate has let go of it: the caller syncs)."""
        if not self.freed:
            self.freed = True
            _driver().cuMemFree_v2(ctypes.c_uint64(self.pointer))


def share_like(t: torch.Tensor, base_bytes: int = 0) -> tuple[DedicatedBuffer, torch.Tensor]:
    """A dedicated buffer holding a copy of `t` with `t`'s size, stride and storage offset, its
    storage beginning `base_bytes` into the allocation."""
    storage_bytes = t.untyped_storage().nbytes()
    buffer = DedicatedBuffer(base_bytes + storage_bytes, t.device)
    shared = buffer.tensor(t.dtype, list(t.shape), list(t.stride()), t.storage_offset(),
                           base_bytes)
    shared.copy_(t)
    return buffer, shared


class OpenedBuffer:
    """The candidate's mapping of one judge allocation; `close` unmaps it."""

    def __init__(self, handle: bytes, nbytes: int, device: torch.device) -> None:
        raw = ipc_handle(handle)
        torch.cuda.current_stream(device)
        self.device = device
        self.nbytes = nbytes
        pointer = ctypes.c_uint64()
        _check(_driver().cuIpcOpenMemHandle_v2(ctypes.byref(pointer), raw,
                                               ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)),
               "cuIpcOpenMemHandle")
        self.pointer = pointer.value
        self.closed = False

    def tensor(self, dtype: torch.dtype, size: list[int], stride: list[int],
               offset: int, base_bytes: int = 0) -> torch.Tensor:
        return _view(self.pointer, self.nbytes, self, dtype, size, stride, offset, self.device,
                     base_bytes)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            _driver().cuIpcCloseMemHandle(ctypes.c_uint64(self.pointer))
