"""How a CUDA kernel file's tunables reach its C++ as `-D NAME=<text>` defines, and what a
CUDA_FILE may be named: the one convention of the kernel-file parser, the build and the runtime
(which an exported module inlines, so this file imports nothing of autokernel)."""

from __future__ import annotations

import re
from typing import Any

C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CU_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.cu$")


class CudaDefineError(ValueError):
    """A tunable's value that no -D define can carry."""


def cuda_define_value(value: Any, name: str = "tunable") -> str:
    """The text of `-D NAME=<text>` for a tunable's value: ints and floats as C literals, bools
    as 1/0, strings as C identifiers (a VARIANT the C++ compares with `#if VARIANT == ...` after
    defining each variant's name, or uses as a token)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return repr(value)
    if isinstance(value, str) and C_IDENTIFIER.match(value):
        return value
    raise CudaDefineError(f"{name}={value!r} cannot reach the CUDA source as a -D define (use "
                          "an int, a bool, a finite float or a C identifier)")
