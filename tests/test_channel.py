"""The judge <-> candidate channel: tensors cross intact, and nothing malformed is believed."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from autokernel.harness import channel

CPU = torch.device("cpu")


def _round_trip(message: dict) -> dict:
    ours, theirs = socket.socketpair()
    sender = threading.Thread(target=channel.send, args=(ours, message))
    sender.start()
    try:
        return channel.receive(theirs, CPU)
    finally:
        sender.join()
        ours.close()
        theirs.close()


def _raw_frame(body: dict | bytes, payload: bytes = b"") -> dict:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    ours, theirs = socket.socketpair()
    ours.sendall(struct.pack("<Q", len(raw) + len(payload)) + struct.pack("<Q", len(raw)) + raw
                 + payload)
    try:
        return channel.receive(theirs, CPU)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64,
                                   torch.bool])
def test_tensors_cross_with_their_values_layout_and_dtype(dtype: torch.dtype) -> None:
    base = (torch.randn(5, 24) * 10).to(dtype)
    row_strided = base[:, :17]          # a slice of a wider buffer
    transposed = base[:, :5].t()        # column-major
    offset = base[2:, 3:]               # a non-zero storage offset
    got = _round_trip({"op": "x", "inputs": [row_strided, transposed, 0.5, None, "text"],
                       "nested": {"t": offset, "n": [1, 2]}, "empty": torch.empty(0, 7)})
    for sent, received in ((row_strided, got["inputs"][0]), (transposed, got["inputs"][1]),
                           (offset, got["nested"]["t"])):
        assert received.dtype == dtype and received.shape == sent.shape
        assert received.stride() == sent.stride()
        assert torch.equal(received, sent)
    assert got["inputs"][2:] == [0.5, None, "text"] and got["nested"]["n"] == [1, 2]
    assert got["empty"].shape == (0, 7)


def test_a_received_tensor_is_a_copy_on_the_cpu() -> None:
    sent = torch.zeros(8)
    got = _round_trip({"t": sent})["t"]
    got += 1
    assert torch.equal(sent, torch.zeros(8))


@pytest.mark.parametrize("descriptor,payload,why", [
    ({"dtype": "complex64", "size": [1], "stride": [1], "offset": 0, "kind": "bytes",
      "nbytes": 8}, b"\0" * 8, "dtype"),
    ({"dtype": "float32", "size": [4], "stride": [1], "offset": 0, "kind": "bytes",
      "nbytes": 8}, b"\0" * 8, "out of bounds"),
    ({"dtype": "float32", "size": [2], "stride": [1], "offset": 0, "kind": "bytes",
      "nbytes": 64}, b"\0" * 8, "past the frame"),
    ({"dtype": "float32", "size": [-1], "stride": [1], "offset": 0, "kind": "bytes",
      "nbytes": 4}, b"\0" * 4, "non-negative"),
    ({"dtype": "float32", "size": [1], "stride": [1], "offset": 0, "kind": "pickle"}, b"",
     "unknown tensor kind"),
    ({"dtype": "float32", "size": [1], "stride": [1], "offset": 0, "kind": "cuda_ipc",
      "device": 0, "counter": "L2V0Yy9wYXNzd2Q="}, b"", "cuda"),
])
def test_a_malformed_tensor_descriptor_is_refused(descriptor: dict, payload: bytes,
                                                  why: str) -> None:
    with pytest.raises(channel.BadMessage) as caught:
        _raw_frame({"out": {"__tensor__": descriptor}}, payload)
    assert why in str(caught.value).lower()


def test_frames_that_are_not_messages_are_refused() -> None:
    with pytest.raises(channel.BadMessage, match="not JSON"):
        _raw_frame(b"\x80\x04pickle")
    with pytest.raises(channel.BadMessage, match="not a JSON object"):
        _raw_frame([1, 2])  # type: ignore[arg-type]
    with pytest.raises(channel.BadMessage, match="trailing"):
        _raw_frame({"op": "x"}, b"extra")
    with pytest.raises(channel.BadMessage, match="malformed tensor"):
        _raw_frame({"t": {"__tensor__": {}, "other": 1}})


def test_an_oversized_frame_is_refused_before_it_is_read() -> None:
    ours, theirs = socket.socketpair()
    ours.sendall(struct.pack("<Q", channel.MAX_FRAME_BYTES + 1) + struct.pack("<Q", 10))
    with pytest.raises(channel.BadMessage, match="frame of"):
        channel.receive(theirs, CPU)


def test_a_closed_channel_says_so() -> None:
    ours, theirs = socket.socketpair()
    ours.close()
    with pytest.raises(channel.ChannelClosed):
        channel.receive(theirs, CPU)


# Two processes on one GPU: the judge hands an input over by CUDA IPC, the candidate writes an
# output into its own memory and hands it back; the judge reads the candidate's buffer.
CUDA_PEER = textwrap.dedent('''
    import socket, sys
    import torch
    from autokernel.harness import channel

    sock = socket.socket(fileno=int(sys.argv[1]))
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    message = channel.receive(sock, device)
    x = message["inputs"][0]
    out = x * 2 + 1  # the candidate's own allocation
    x[:1] = -5.0  # lands in the judge's buffer: the input is mapped, not copied
    torch.cuda.synchronize()
    channel.send(sock, {"out": out})
    channel.receive(sock, device)  # the judge is done with `out`
''')


@pytest.mark.gpu
def test_cuda_tensors_cross_by_ipc_between_processes(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    device = torch.device("cuda", 0)
    ours, theirs = socket.socketpair()
    peer = subprocess.Popen([sys.executable, "-c", CUDA_PEER, str(theirs.fileno())],
                            pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        x = torch.arange(4096, dtype=torch.float32, device=device)[::2]  # strided view
        expected = x * 2 + 1
        channel.send(ours, {"inputs": [x]})
        reply = channel.receive(ours, device)
        assert reply["out"].is_cuda and torch.equal(reply["out"], expected)
        assert x[0].item() == -5.0
        del reply
        channel.send(ours, {"op": "done"})
        assert peer.wait(60) == 0
    finally:
        peer.kill()
        ours.close()
