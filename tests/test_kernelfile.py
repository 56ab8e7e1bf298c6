"""The kernel.py format: read without importing, tunables edited in place."""

from __future__ import annotations

import pytest

from autokernel.kernelfile import (
    KernelFileError,
    parse_kernel_source,
    set_tunables,
)

MINIMAL = '''
KERNEL_TYPE = "softmax"
BACKEND = "triton"

def kernel_fn(x):
    return x
'''

TUNABLE = '''"""doc"""
KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"

BLOCK_N = 1024  # columns per block
NUM_WARPS: int = 4
VARIANT = "one_pass"
TUNABLE_SPACE = {
    "BLOCK_N": [256, 512, 1024, 2048],
    "NUM_WARPS": [2, 4, 8],
    "VARIANT": ["one_pass", "two_pass"],
}


def kernel_fn(x, weight, eps=1e-6):
    return x  # BLOCK_N = 7 in a comment stays untouched
'''


def test_minimal_file_is_accepted() -> None:
    info = parse_kernel_source(MINIMAL)
    assert (info.kernel_type, info.backend, info.tunables, info.space) == (
        "softmax", "triton", {}, {}
    )


def test_tunables_and_space_are_read_without_import() -> None:
    info = parse_kernel_source(TUNABLE)
    assert info.tunables == {"BLOCK_N": 1024, "NUM_WARPS": 4, "VARIANT": "one_pass"}
    assert info.space["VARIANT"] == ["one_pass", "two_pass"]


def test_set_tunables_rewrites_only_the_literals() -> None:
    edited = set_tunables(TUNABLE, {"BLOCK_N": 2048, "VARIANT": "two_pass"})
    assert parse_kernel_source(edited).tunables == {
        "BLOCK_N": 2048, "NUM_WARPS": 4, "VARIANT": "two_pass"
    }
    assert "BLOCK_N = 2048  # columns per block" in edited
    assert "# BLOCK_N = 7 in a comment stays untouched" in edited
    # Everything outside the two literals is byte-identical.
    assert edited.replace("2048  #", "1024  #", 1).replace("'two_pass'", '"one_pass"', 1) == TUNABLE


@pytest.mark.parametrize(
    "source, message",
    [
        ("BACKEND = 'triton'\ndef kernel_fn(x): pass\n", "KERNEL_TYPE"),
        ("KERNEL_TYPE = 'conv'\nBACKEND = 'triton'\ndef kernel_fn(x): pass\n", "not one of"),
        ("KERNEL_TYPE = 'reduce'\nBACKEND = 'rocm'\ndef kernel_fn(x): pass\n", "BACKEND"),
        ("KERNEL_TYPE = 'reduce'\nBACKEND = 'triton'\n", "kernel_fn"),
        ("KERNEL_TYPE = 'reduce'\nBACKEND = 'triton'\ndef kernel_fn(x:\n", "syntax error"),
        ("KERNEL_TYPE = 'reduce'\nBACKEND = 'triton'\nTUNABLE_SPACE = {'B': [1]}\n"
         "def kernel_fn(x): pass\n", "no module-level assignment"),
        ("KERNEL_TYPE = 'reduce'\nBACKEND = 'triton'\nB = f()\nTUNABLE_SPACE = {'B': [1]}\n"
         "def kernel_fn(x): pass\n", "literal"),
    ],
)
def test_malformed_files_are_refused_with_a_reason(source: str, message: str) -> None:
    with pytest.raises(KernelFileError, match=message):
        parse_kernel_source(source)


def test_set_tunables_refuses_unknown_names() -> None:
    with pytest.raises(KernelFileError, match="not tunables"):
        set_tunables(TUNABLE, {"GRID": 3})
