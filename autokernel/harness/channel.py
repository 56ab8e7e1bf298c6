"""The pipe between the judge and the candidate process: JSON messages carrying tensors.

Nothing crossing it is ever unpickled. A message is one JSON object; every tensor in it is
replaced by a descriptor that the receiver checks field by field before rebuilding the tensor:

- from the judge, a CUDA tensor crosses only as a `Shared` one: a dedicated driver allocation of
  its own (`dedicated`), whose handle maps that allocation and nothing else of the judge's. A plain
  CUDA tensor is refused: torch's own IPC handle would map the caching allocator's whole segment.
- from the candidate, a CUDA tensor crosses by torch's CUDA IPC (`torch.multiprocessing`'s handle,
  ref counter and event, without its pickle): the judge maps the candidate's memory, no copy.
- a CPU tensor crosses as the bytes of its storage, with size, stride and offset, so a strided
  input stays strided.

Each receiver names the tensor kinds it accepts (`JUDGE_ACCEPTS`, `CANDIDATE_ACCEPTS`): the judge
never maps a handle kind meant for the other direction. A frame is an 8-byte length, the JSON,
then the CPU tensors' bytes in order. `pending` tells whether the other side wrote more than the
one reply expected (the judge refuses a channel with an unasked-for frame on it).
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
from typing import Any

import torch

from autokernel.harness.dedicated import BASE_ALIGN_BYTES, DedicatedBuffer, OpenedBuffer

# A frame past this is refused (the judge reads what the candidate sends).
MAX_FRAME_BYTES = 1 << 36
MAX_JSON_BYTES = 1 << 26
_LENGTH = struct.Struct("<Q")
_TENSOR = "__tensor__"
# torch names its CUDA IPC ref counters /torch_<pid>_<random>_<n> in /dev/shm.
_REF_COUNTER_NAME = re.compile(rb"^/torch_[0-9]+_[0-9]+_[0-9]+$")
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool)}


JUDGE_ACCEPTS = frozenset({"empty", "bytes", "cuda_ipc"})
CANDIDATE_ACCEPTS = frozenset({"empty", "bytes", "dedicated"})


class Shared:
    """A judge tensor in a dedicated allocation (`dedicated.share_like`), to cross by its handle."""

    def __init__(self, buffer: DedicatedBuffer, tensor: torch.Tensor) -> None:
        self.buffer, self.tensor = buffer, tensor

    @property
    def base_bytes(self) -> int:
        """Where the tensor's storage begins in the allocation (`dedicated.share_like`)."""
        return self.tensor.untyped_storage().data_ptr() - self.buffer.pointer


class ChannelClosed(EOFError):
    """The other process closed its end (it exited or died)."""


class BadMessage(ValueError):
    """A frame that is not a well-formed message (the candidate may send anything)."""


def send(sock: socket.socket, message: dict[str, Any], cuda_ipc: bool = True) -> None:
    """Send one message; tensors anywhere in it (values of dicts, items of lists) cross.
    With `cuda_ipc=False` (the judge) a plain CUDA tensor is refused: only `Shared` ones cross."""
    payloads: list[memoryview] = []
    body = json.dumps(_encode(message, payloads, cuda_ipc)).encode()
    total = len(body) + sum(len(p) for p in payloads)
    sock.sendall(_LENGTH.pack(total) + _LENGTH.pack(len(body)) + body)
    for payload in payloads:
        sock.sendall(payload)


def receive(sock: socket.socket, device: torch.device, accept: frozenset[str] = JUDGE_ACCEPTS,
            opened: list[OpenedBuffer] | None = None) -> dict[str, Any]:
    """The next message, its tensors rebuilt (CUDA ones only on `device`), of the kinds in
    `accept` only; dedicated allocations mapped here are appended to `opened` (to close later)."""
    total, = _LENGTH.unpack(_read(sock, _LENGTH.size))
    json_len, = _LENGTH.unpack(_read(sock, _LENGTH.size))
    if total > MAX_FRAME_BYTES or json_len > min(total, MAX_JSON_BYTES):
        raise BadMessage(f"a frame of {total} bytes ({json_len} of JSON)")
    body = _read(sock, json_len)
    rest = memoryview(bytearray(_read(sock, total - json_len)))
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise BadMessage(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise BadMessage("not a JSON object")
    offset = [0]
    context = _Decoding(rest, offset, device, accept, opened if opened is not None else [])
    decoded = _decode(message, context)
    if offset[0] != len(rest):
        raise BadMessage("trailing bytes after the message's tensors")
    return decoded


def pending(sock: socket.socket) -> bool:
    """Whether bytes are waiting on the socket (a frame nobody asked for)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return False


def _read(sock: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = sock.recv(min(left, 1 << 24))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- encoding ------------------------------------------------------------------------------------

def _encode(value: Any, payloads: list[memoryview], cuda_ipc: bool) -> Any:
    if isinstance(value, Shared):
        return {_TENSOR: _describe_shared(value)}
    if isinstance(value, torch.Tensor):
        return {_TENSOR: _describe(value, payloads, cuda_ipc)}
    if isinstance(value, dict):
        return {str(k): _encode(v, payloads, cuda_ipc) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, payloads, cuda_ipc) for v in value]
    return value


def _head(t: torch.Tensor) -> dict[str, Any]:
    return {"dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape),
            "stride": list(t.stride()), "offset": t.storage_offset()}


def _describe_shared(shared: Shared) -> dict[str, Any]:
    t = shared.tensor
    return {**_head(t), "kind": "dedicated", "device": t.device.index or 0,
            "handle": _b64(shared.buffer.handle), "alloc_bytes": shared.buffer.nbytes,
            "base_bytes": shared.base_bytes}


def _describe(t: torch.Tensor, payloads: list[memoryview], cuda_ipc: bool) -> dict[str, Any]:
    t = t.detach()
    head = _head(t)
    if t.numel() == 0:
        return {**head, "kind": "empty", "device": t.device.type}
    if t.device.type == "cuda" and not cuda_ipc:
        raise ValueError("a CUDA tensor crosses from the judge only in a dedicated allocation "
                         "(channel.Shared)")
    if t.device.type == "cuda":
        from torch.multiprocessing.reductions import reduce_tensor

        _, args = reduce_tensor(t)
        (_, _, _, _, _, _, device, handle, size_bytes, offset_bytes, _, counter, counter_offset,
         event, event_sync) = args
        return {**head, "kind": "cuda_ipc", "device": int(device),
                "handle": _b64(handle), "storage_bytes": int(size_bytes),
                "storage_offset_bytes": int(offset_bytes), "counter": _b64(counter),
                "counter_offset": int(counter_offset),
                "event": _b64(event) if event is not None else None,
                "event_sync": bool(event_sync)}
    if t.device.type != "cpu":
        raise ValueError(f"a tensor on {t.device} cannot cross")
    storage = t.untyped_storage()
    payloads.append(storage_bytes(storage))
    return {**head, "kind": "bytes", "nbytes": storage.nbytes()}


def storage_bytes(storage: torch.UntypedStorage) -> memoryview:
    """A CPU storage's bytes, without a copy. `bytes(storage)` iterates it a byte at a time in
    Python (about 4 µs a byte: a second for a 256 KiB output)."""
    flat = torch.empty(0, dtype=torch.uint8).set_(storage)
    return memoryview(flat.numpy()).cast("B")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- decoding (of anything the other side may have written) --------------------------------------

class _Decoding:
    def __init__(self, rest: memoryview, offset: list[int], device: torch.device,
                 accept: frozenset[str], opened: list[OpenedBuffer]) -> None:
        self.rest, self.offset, self.device = rest, offset, device
        self.accept, self.opened = accept, opened


def _decode(value: Any, context: _Decoding) -> Any:
    if isinstance(value, dict):
        if _TENSOR in value:
            if len(value) != 1 or not isinstance(value[_TENSOR], dict):
                raise BadMessage("a malformed tensor descriptor")
            return _rebuild(value[_TENSOR], context)
        return {k: _decode(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, context) for v in value]
    return value


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise BadMessage(f"tensor {what} must be a list of non-negative ints")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise BadMessage(f"tensor {what} must be a non-negative int")
    return value


def _rebuild(d: dict[str, Any], context: _Decoding) -> torch.Tensor:
    rest, offset, device = context.rest, context.offset, context.device
    dtype = _DTYPES.get(d.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise BadMessage(f"unsupported tensor dtype {d.get('dtype')!r}")
    size, stride = _ints(d.get("size"), "size"), _ints(d.get("stride"), "stride")
    storage_offset = _int(d.get("offset"), "offset")
    if len(size) != len(stride) or len(size) > 16:
        raise BadMessage("tensor size and stride disagree")
    kind = d.get("kind")
    if kind not in context.accept:
        raise BadMessage(f"unknown tensor kind {kind!r}" if kind not in _KINDS else
                         f"a tensor of kind {kind!r}, which this side never accepts")
    if kind == "empty":
        where = device if d.get("device") == device.type else torch.device("cpu")
        return torch.empty(size, dtype=dtype, device=where)
    if kind == "bytes":
        nbytes = _int(d.get("nbytes"), "nbytes")
        if offset[0] + nbytes > len(rest):
            raise BadMessage("a tensor's bytes run past the frame")
        raw = rest[offset[0]: offset[0] + nbytes]
        offset[0] += nbytes
        storage = torch.UntypedStorage.from_buffer(raw, byte_order="native", dtype=torch.uint8) \
            if nbytes else torch.UntypedStorage(0)
        _check_extent(size, stride, storage_offset, dtype, nbytes)
        return torch.empty(0, dtype=dtype).set_(storage, storage_offset, size, stride)
    if kind == "cuda_ipc":
        return _rebuild_cuda(d, dtype, size, stride, storage_offset, device)
    return _open_dedicated(d, dtype, size, stride, storage_offset, context)


_KINDS = frozenset({"empty", "bytes", "cuda_ipc", "dedicated"})


def _open_dedicated(d: dict[str, Any], dtype: torch.dtype, size: list[int], stride: list[int],
                    storage_offset: int, context: _Decoding) -> torch.Tensor:
    device = context.device
    if device.type != "cuda" or d.get("device") != (device.index or 0):
        raise BadMessage(f"a CUDA tensor of device {d.get('device')!r}, expected {device}")
    alloc_bytes = _int(d.get("alloc_bytes"), "alloc_bytes")
    base_bytes = _int(d.get("base_bytes", 0), "base_bytes")
    if base_bytes % BASE_ALIGN_BYTES or base_bytes >= alloc_bytes:
        raise BadMessage(f"a storage base of {base_bytes} bytes in {alloc_bytes}")
    _check_extent(size, stride, storage_offset, dtype, alloc_bytes - base_bytes)
    opened = OpenedBuffer(_raw(d.get("handle"), "memory handle"), alloc_bytes, device)
    context.opened.append(opened)
    return opened.tensor(dtype, size, stride, storage_offset, base_bytes)


def _check_extent(size: list[int], stride: list[int], storage_offset: int, dtype: torch.dtype,
                  storage_bytes: int) -> None:
    """The last element the view reaches lies inside its storage (torch would grow a CPU storage
    rather than refuse)."""
    element = torch.empty((), dtype=dtype).element_size()
    extent = storage_offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1
    if extent * element > storage_bytes:
        raise BadMessage(f"a tensor out of bounds of its storage ({extent * element} > "
                         f"{storage_bytes} bytes)")


def _raw(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise BadMessage(f"{what} must be base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise BadMessage(f"{what} is not base64") from None


def _rebuild_cuda(d: dict[str, Any], dtype: torch.dtype, size: list[int], stride: list[int],
                  storage_offset: int, device: torch.device) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    if device.type != "cuda" or d.get("device") != (device.index or 0):
        raise BadMessage(f"a CUDA tensor of device {d.get('device')!r}, expected {device}")
    counter = _raw(d.get("counter"), "ref counter name")
    if not _REF_COUNTER_NAME.match(counter):
        raise BadMessage(f"unexpected ref counter name {counter[:64]!r}")
    event = None if d.get("event") is None else _raw(d.get("event"), "event handle")
    storage_bytes = _int(d.get("storage_bytes"), "storage_bytes")
    _check_extent(size, stride, storage_offset, dtype, storage_bytes)
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(size), tuple(stride), storage_offset, torch.storage.TypedStorage,
        dtype, int(d["device"]), _raw(d.get("handle"), "memory handle"), storage_bytes,
        _int(d.get("storage_offset_bytes"), "storage_offset_bytes"), False, counter,
        _int(d.get("counter_offset"), "counter_offset"), event, bool(d.get("event_sync")))
