"""Poisoned memory where the candidate's output will come from, so an unwritten element shows."""

from __future__ import annotations

import torch

from autokernel.harness.compare import POISON_BYTE


def poison_allocator(nbytes: int, device: torch.device, blocks: int = 2,
                     pattern: int = POISON_BYTE) -> None:
    """Leave poisoned free blocks of `nbytes` where the candidate's next allocation comes from.

    CUDA's caching allocator hands out the best-fitting cached block, so every cached free block
    of this size is taken (and poisoned) until fresh memory is needed; glibc hands a freed chunk
    of the same size straight back. Either way the output starts as 0xFF bytes, not as a stale
    answer.
    """
    if nbytes <= 0:
        return
    held = []
    if device.type == "cuda":
        reserved = torch.cuda.memory_reserved(device)
        for _ in range(64):
            try:
                block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            except torch.cuda.OutOfMemoryError:
                break  # every cached block that could serve this size is already poisoned
            block.fill_(pattern)
            held.append(block)
            if len(held) >= blocks and torch.cuda.memory_reserved(device) > reserved:
                break
    else:
        for _ in range(blocks):
            block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            block.fill_(pattern)
            held.append(block)
    del held


def poison_free_cache(device: torch.device) -> int:
    """Fill every free block of CUDA's caching allocator with poison (after the reference
    phase, so no intermediate of an oracle survives in memory the candidate may be handed).
    Returns the bytes poisoned; 0 on CPU, where freed memory is not cached by torch."""
    if device.type != "cuda":
        return 0
    sizes = [block["size"] for segment in torch.cuda.memory_snapshot()
             if segment.get("device", device.index or 0) == (device.index or 0)
             for block in segment.get("blocks", []) if block.get("state") == "inactive"]
    held = []
    total = 0
    for size in sorted(sizes, reverse=True):
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            continue
        block.fill_(POISON_BYTE)
        held.append(block)
        total += size
    del held
    return total
