"""`HostWriteLedger`: on the CPU, memory may change only through Triton launches and torch ops.

On the CPU a tensor's memory is host memory: a kernel that reaches it raw (ctypes, numpy over an
address) can compute its answer on the host between or after its launches, where no aten op and
no launch sees it, and a token launch that only copies still makes the ghost replay's output
wrong. While a correctness call runs, the ledger keeps the bytes of every storage it has seen as
of the last launch or torch op that touched it (its state at first sight otherwise: a fresh
allocation's is the poison); before each launch and each torch op, the storages they touch must
still hold those bytes, and when the call returns, every storage seen must. A difference is a
write no launch and no torch op made: host compute on raw memory.

What this leaves: memory first seen after a host write (a tensor over foreign memory, which the
scan and the host-read guard already keep a kernel from making). A GPU's device memory is not
host-writable this way; there the ledger is off (and in timed calls, which the audits check).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import torch


def _storages(values: Any, depth: int = 0) -> Iterator[tuple[int, Any]]:
    """(address, storage) of every CPU tensor in `values` (nested lists, tuples, dicts)."""
    if isinstance(values, torch.Tensor):  # plain tensors only: a subclass's methods are its own
        if type(values) in (torch.Tensor, torch.nn.Parameter) and values.device.type == "cpu" \
                and values.layout is torch.strided:
            try:
                storage = values.untyped_storage()
                address = storage.data_ptr()
            except (RuntimeError, NotImplementedError):  # no storage of its own (meta, ...)
                return
            if address and storage.nbytes():
                yield address, storage
    elif depth < 4 and isinstance(values, (list, tuple)):
        for value in values:
            yield from _storages(value, depth + 1)
    elif depth < 4 and isinstance(values, dict):
        for value in values.values():
            yield from _storages(value, depth + 1)


class HostWriteLedger:
    """The last bytes the launches and torch ops left in each storage seen during one call."""

    def __init__(self) -> None:
        # address -> (storage, bytes): the storage is held, so its memory is not reused
        # during the call (cleared when the call ends).
        self.known: dict[int, tuple[Any, bytes]] = {}
        self.findings: list[str] = []

    def check(self, values: Any, before: str) -> None:
        """The storages in `values` must hold what the ledger last saw in them."""
        for address, storage in _storages(values):
            self._compare(address, storage, before)

    def note(self, values: Any) -> None:
        """A launch or torch op touched `values`: their storages' bytes now are the known ones."""
        for address, storage in _storages(values):
            self.known[address] = (storage, ctypes.string_at(address, storage.nbytes()))

    def close(self) -> None:
        """At the end of the call: every storage seen must still hold its known bytes."""
        try:
            for address, (storage, _) in list(self.known.items()):
                self._compare(address, storage, "kernel_fn returned")
        finally:
            self.known.clear()

    def _compare(self, address: int, storage: Any, before: str) -> None:
        entry = self.known.get(address)
        if entry is None:
            return
        nbytes = min(storage.nbytes(), len(entry[1]))
        if ctypes.string_at(address, nbytes) != entry[1][:nbytes]:
            self.findings.append(
                f"a host write to tensor memory (a storage of {nbytes} bytes changed since the "
                f"last Triton launch or torch op that touched it, found before {before}: host "
                "compute on raw memory, through ctypes or numpy)")
            self.known[address] = (storage, ctypes.string_at(address, nbytes))
