"""The pipe between the judge and the candidate process: JSON messages carrying tensors.

Nothing crossing it is ever unpickled. A message is one JSON object; every tensor in it is
replaced by a descriptor that the receiver checks field by field before rebuilding the tensor:

- a CUDA tensor crosses by CUDA IPC (`torch.multiprocessing`'s handle, ref counter and event,
  without its pickle): the receiver maps the sender's memory, no copy. So the candidate's view of
  an input is the judge's buffer, and the judge's view of an output is the candidate's.
- a CPU tensor crosses as the bytes of its storage, with size, stride and offset, so a strided
  input stays strided.

A frame is an 8-byte length, the JSON, then the CPU tensors' bytes in order.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
from typing import Any

import torch

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


class ChannelClosed(EOFError):
    """The other process closed its end (it exited or died)."""


class BadMessage(ValueError):
    """A frame that is not a well-formed message (the candidate may send anything)."""


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message; tensors anywhere in it (values of dicts, items of lists) cross."""
    payloads: list[bytes] = []
    body = json.dumps(_encode(message, payloads)).encode()
    total = len(body) + sum(len(p) for p in payloads)
    sock.sendall(_LENGTH.pack(total) + _LENGTH.pack(len(body)) + body)
    for payload in payloads:
        sock.sendall(payload)


def receive(sock: socket.socket, device: torch.device) -> dict[str, Any]:
    """The next message, its tensors rebuilt (CUDA ones only on `device`)."""
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
    decoded = _decode(message, rest, offset, device)
    if offset[0] != len(rest):
        raise BadMessage("trailing bytes after the message's tensors")
    return decoded


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

def _encode(value: Any, payloads: list[bytes]) -> Any:
    if isinstance(value, torch.Tensor):
        return {_TENSOR: _describe(value, payloads)}
    if isinstance(value, dict):
        return {str(k): _encode(v, payloads) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, payloads) for v in value]
    return value


def _describe(t: torch.Tensor, payloads: list[bytes]) -> dict[str, Any]:
    t = t.detach()
    head = {"dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape),
            "stride": list(t.stride()), "offset": t.storage_offset()}
    if t.numel() == 0:
        return {**head, "kind": "empty", "device": t.device.type}
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
    payloads.append(bytes(storage))
    return {**head, "kind": "bytes", "nbytes": storage.nbytes()}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- decoding (of anything the other side may have written) --------------------------------------

def _decode(value: Any, rest: memoryview, offset: list[int], device: torch.device) -> Any:
    if isinstance(value, dict):
        if _TENSOR in value:
            if len(value) != 1 or not isinstance(value[_TENSOR], dict):
                raise BadMessage("a malformed tensor descriptor")
            return _rebuild(value[_TENSOR], rest, offset, device)
        return {k: _decode(v, rest, offset, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, rest, offset, device) for v in value]
    return value


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise BadMessage(f"tensor {what} must be a list of non-negative ints")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise BadMessage(f"tensor {what} must be a non-negative int")
    return value


def _rebuild(d: dict[str, Any], rest: memoryview, offset: list[int],
             device: torch.device) -> torch.Tensor:
    dtype = _DTYPES.get(d.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise BadMessage(f"unsupported tensor dtype {d.get('dtype')!r}")
    size, stride = _ints(d.get("size"), "size"), _ints(d.get("stride"), "stride")
    storage_offset = _int(d.get("offset"), "offset")
    if len(size) != len(stride) or len(size) > 16:
        raise BadMessage("tensor size and stride disagree")
    kind = d.get("kind")
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
    raise BadMessage(f"unknown tensor kind {kind!r}")


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
