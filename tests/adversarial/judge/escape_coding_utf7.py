# coding: utf-7
"""CHEAT (class 1, scan escape): a UTF-7 coding cookie. The scanner reads UTF-8 text; Python
decodes +AAo- as a newline and runs a line the scanner sees as a comment.
Expected: REJECTED (encoding), with the scan on or off: the runner refuses the cookie."""
import torch

KERNEL_TYPE = "softmax"
BACKEND = "triton"

# +AAo-import os+ADs- os.environ+AFs-'X'+AF0- +AD0- '1'


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    return x
