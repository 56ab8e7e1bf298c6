"""Poisoned memory where the candidate's output will come from, so an unwritten element shows.

The poison is chosen afresh for every job (`Poison.fresh`, in the judge), so that no fixed
pattern tells the harness apart from a model: either every element holds one NaN bit pattern of
its dtype drawn for this job (sign, quiet bit and a random payload: the judge then names the
elements that still hold it "never written"), or the memory holds random bytes (an unwritten
element is then simply a wrong value). Fresh memory in a model holds whatever was there before;
a kernel that reads its output buffer before writing it cannot tell this from that.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, replace

import torch

from autokernel.ops.spec import dtype_name

# Float dtypes: (exponent bits, explicit mantissa bits, same-width signed integer view).
FLOAT_LAYOUTS: dict[torch.dtype, tuple[int, int, torch.dtype]] = {
    torch.float16: (5, 10, torch.int16), torch.bfloat16: (8, 7, torch.int16),
    torch.float32: (8, 23, torch.int32), torch.float64: (11, 52, torch.int64),
}
INT_VIEWS: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                                     8: torch.int64}
MODES = ("nan", "bytes")
POISON_MODE_ENV = "AUTOKERNEL_POISON_MODE"  # tests only: one of MODES instead of the draw


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def random_nan_bits(dtype: torch.dtype) -> int:
    """A NaN of `dtype`: random sign, exponent all ones, quiet bit set, random payload."""
    exponent, mantissa, _ = FLOAT_LAYOUTS[dtype]
    all_ones = (1 << (1 + exponent + mantissa)) - 1  # the old fixed poison: never again
    while True:
        sign = secrets.randbits(1)
        payload = (1 << (mantissa - 1)) | secrets.randbits(mantissa - 1)
        bits = (sign << (exponent + mantissa)) | (((1 << exponent) - 1) << mantissa) | payload
        if bits != all_ones:
            return bits


@dataclass(frozen=True)
class Poison:
    """This job's poison: `mode` "nan" (one NaN pattern per float dtype, `bits`; random bits
    per integer dtype) or "bytes" (random bytes from `byte_seed`)."""

    mode: str
    bits: dict[str, int]
    byte_seed: int

    @classmethod
    def fresh(cls) -> Poison:
        bits = {dtype_name(d): random_nan_bits(d) for d in FLOAT_LAYOUTS}
        bits.update({f"int{8 * size}": secrets.randbits(8 * size) for size in INT_VIEWS})
        # The mode is the judge's draw; a test that asserts one mode's verdict fixes it in the
        # judge's environment (random bytes make a single unwritten element a wrong value,
        # within tolerance of a small answer about a time in four in fp16: the one-column drop
        # of tests/adversarial/drops_wide_columns.py then passes its edge case).
        mode = os.environ.get(POISON_MODE_ENV) or MODES[secrets.randbelow(len(MODES))]
        if mode not in MODES:
            raise ValueError(f"{POISON_MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
        return cls(mode=mode, bits=bits, byte_seed=secrets.randbits(62))

    def recognisable(self) -> Poison:
        """This job's poison in "nan" mode, for the ghost replay's calls. The replay asks whether
        the skipped launches wrote the output, which random bytes cannot answer: where the
        reference is near zero (a scalar loss of 0, a one-element product) they are within
        tolerance of it about half the time (every float below ~2^-14 is within 1e-4 of 0), and
        an honest kernel's untouched output would read as computed without its kernels. A
        candidate cannot see the difference: its launches are skipped and host reads refused."""
        return replace(self, mode="nan")

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "bits": dict(self.bits), "byte_seed": self.byte_seed}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Poison:
        mode, bits, seed = data.get("mode"), data.get("bits"), data.get("byte_seed")
        if mode not in MODES or not isinstance(bits, dict) or type(seed) is not int:
            raise ValueError("a malformed poison description")
        return cls(str(mode), {str(k): int(v) for k, v in bits.items()}, seed)

    def _pattern(self, dtype: torch.dtype) -> tuple[torch.dtype, int]:
        """(integer view, signed value) of this job's poison element for `dtype`."""
        if dtype in FLOAT_LAYOUTS:
            view = FLOAT_LAYOUTS[dtype][2]
            bits = self.bits[dtype_name(dtype)]
        else:
            size = torch.empty((), dtype=dtype).element_size()
            view = INT_VIEWS[size]
            bits = self.bits[f"int{8 * size}"]
        width = torch.empty((), dtype=view).element_size() * 8
        return view, (bits & ((1 << width) - 1) if view == torch.uint8 else _signed(bits, width))

    def fill(self, raw: torch.Tensor, dtype: torch.dtype | None,
             generator: torch.Generator | None = None) -> None:
        """Poison the bytes of `raw` (a uint8 tensor), as elements of `dtype` in "nan" mode."""
        if raw.numel() == 0:
            return
        if self.mode == "bytes" or dtype is None or dtype == torch.bool:
            raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, device=raw.device,
                                    generator=generator))
            return
        view, value = self._pattern(dtype)
        size = torch.empty((), dtype=view).element_size()
        whole = raw.numel() - raw.numel() % size
        if whole:
            raw[:whole].view(view).fill_(value)
        if whole < raw.numel():
            raw[whole:].copy_(raw[: raw.numel() - whole])

    def marks(self, out: torch.Tensor) -> torch.Tensor | None:
        """Elements of `out` still holding this job's poison; None when the mode cannot tell
        ("bytes": they are wrong values like any other)."""
        if self.mode != "nan" or out.dtype == torch.bool:
            return None
        view, value = self._pattern(out.dtype)
        return out.contiguous().view(view) == value


class PoisonFiller:
    """Fills memory with one job's poison in the candidate process (a generator of its own for
    "bytes" mode, made on first use)."""

    def __init__(self, poison: Poison, device: torch.device) -> None:
        self.poison, self.device = poison, device
        self._generator: torch.Generator | None = None

    def fill(self, raw: torch.Tensor, dtype: torch.dtype | None) -> None:
        if self.poison.mode == "bytes" and self._generator is None:
            self._generator = torch.Generator(device=raw.device).manual_seed(self.poison.byte_seed)
        self.poison.fill(raw, dtype, self._generator)

    def storage(self, tensor: torch.Tensor) -> None:
        """Poison the whole storage behind a fresh allocation."""
        storage = tensor.untyped_storage()
        raw = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        self.fill(raw, tensor.dtype)


def poison_allocator(nbytes: int, device: torch.device, filler: PoisonFiller,
                     dtype: torch.dtype | None, blocks: int = 2) -> None:
    """Leave poisoned free blocks of `nbytes` where the candidate's next allocation comes from.

    CUDA's caching allocator hands out the best-fitting cached block, so every cached free block
    of this size is taken (and poisoned) until fresh memory is needed; glibc hands a freed chunk
    of the same size straight back. Either way the output starts as poison, not as a stale
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
            filler.fill(block, dtype)
            held.append(block)
            if len(held) >= blocks and torch.cuda.memory_reserved(device) > reserved:
                break
    else:
        for _ in range(blocks):
            block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            filler.fill(block, dtype)
            held.append(block)
    del held


def poison_free_cache(device: torch.device, filler: PoisonFiller) -> int:
    """Fill every free block of CUDA's caching allocator with poison. Returns the bytes
    poisoned; 0 on CPU, where freed memory is not cached by torch."""
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
        filler.fill(block, None)
        held.append(block)
        total += size
    del held
    return total
