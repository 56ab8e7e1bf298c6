"""The CUDA IPC handle's bytes, on the CPU: all 64 cross, zeros included; the storage base the
judge draws crosses with the handle and is checked (the GPU part of the dedicated allocations is
in tests/test_judge_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from autokernel.harness import channel
from autokernel.harness.dedicated import (
    BASE_ALIGN_BYTES, BASE_SLOTS, IPC_HANDLE_BYTES, PAGE_BYTES, DedicatedMemoryError,
    handle_bytes, ipc_handle,
)


def test_a_handle_with_zeros_crosses_whole() -> None:
    raw = bytes([7, 0, 0, 9] + [0] * (IPC_HANDLE_BYTES - 5) + [3])
    assert handle_bytes(ipc_handle(raw)) == raw


def test_a_handle_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(DedicatedMemoryError, match="wrong size"):
        ipc_handle(b"\x01" * (IPC_HANDLE_BYTES - 1))


# -- the storage base the judge draws per hand-over ------------------------------------------------

class _FakeBuffer:
    """A DedicatedBuffer's fields, over host memory (no driver call)."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.pointer, self.nbytes, self.handle = pointer, nbytes, bytes(IPC_HANDLE_BYTES)


def test_a_shared_tensor_says_where_its_storage_begins() -> None:
    t = torch.arange(8, dtype=torch.float32)
    fake = _FakeBuffer(t.untyped_storage().data_ptr() - 3 * BASE_ALIGN_BYTES, PAGE_BYTES)
    described = channel._describe_shared(channel.Shared(fake, t))
    assert described["base_bytes"] == 3 * BASE_ALIGN_BYTES
    assert described["offset"] == 0  # the tensor's own storage offset is untouched


@pytest.mark.parametrize("base,text", [(100, "storage base of 100"),
                                       (PAGE_BYTES, "storage base of"),
                                       (-512, "non-negative")])
def test_a_base_off_its_alignment_or_outside_the_allocation_is_refused(base: int,
                                                                      text: str) -> None:
    descriptor = {"kind": "dedicated", "device": 0, "handle": "", "alloc_bytes": PAGE_BYTES,
                  "base_bytes": base}
    context = channel._Decoding(memoryview(b""), [0], torch.device("cuda", 0),
                                channel.CANDIDATE_ACCEPTS, [])
    with pytest.raises(channel.BadMessage, match=text):
        channel._open_dedicated(descriptor, torch.float16, [4], [1], 0, context)


def test_bases_are_aligned_and_many() -> None:
    # a pointer-counting kernel sees a new address nearly every call: 1 in BASE_SLOTS repeats
    assert BASE_ALIGN_BYTES % 512 == 0 and BASE_SLOTS >= 256
    assert (BASE_SLOTS - 1) * BASE_ALIGN_BYTES < PAGE_BYTES
