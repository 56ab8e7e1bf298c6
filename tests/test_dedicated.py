"""The CUDA IPC handle's bytes, on the CPU: all 64 cross, zeros included (the GPU part of the
dedicated allocations is in tests/test_judge_gpu.py)."""

from __future__ import annotations

import pytest

from autokernel.harness.dedicated import (
    IPC_HANDLE_BYTES, DedicatedMemoryError, handle_bytes, ipc_handle,
)


def test_a_handle_with_zeros_crosses_whole() -> None:
    raw = bytes([7, 0, 0, 9] + [0] * (IPC_HANDLE_BYTES - 5) + [3])
    assert handle_bytes(ipc_handle(raw)) == raw


def test_a_handle_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(DedicatedMemoryError, match="wrong size"):
        ipc_handle(b"\x01" * (IPC_HANDLE_BYTES - 1))
