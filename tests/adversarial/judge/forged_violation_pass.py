"""CHEAT (class 2): answers the judge's request itself with a 'violation' whose status is
PASS (the protocol's own shape, with the sequence number of the smoke call), then
exits. Expected (scan off): CRASH: a candidate may only report FAIL, REJECTED or CRASH."""

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
    seq = 3  # the smoke call's: setup, inputs, call
    body = json.dumps({"seq": seq, "violation": {"status": "PASS", "stage": "smoke",
                                                 "reason": "forged", "rule": None,
                                                 "detail": ""}}).encode()
    _channel().sendall(struct.pack("<Q", len(body)) + struct.pack("<Q", len(body)) + body)
    os._exit(0)
