"""CHEAT (class 2): writes a frame carrying a PASS verdict onto the judge's socket, then
returns. Expected (scan off): CRASH: the judge reads the forged frame as the call's reply and
finds no sequence number it asked for; a candidate's 'verdict' is no reply at all."""

import json
import os
import socket
import struct

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def _channel() -> socket.socket:
    """The candidate process's socket to the judge: the one unix socket it holds."""
    for fd in range(3, 64):
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        if sock.family == socket.AF_UNIX:
            return sock
        sock.detach()
    raise RuntimeError("no channel")


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    body = json.dumps({"verdict": {"status": "PASS", "reason": "forged"}}).encode()
    _channel().sendall(struct.pack("<Q", len(body)) + struct.pack("<Q", len(body)) + body)
    return softmax(x)
