"""The numpy >= 2.4 fix for triton 3.6's interpreter (autokernel/interpreter_compat.py).

CI pins numpy < 2.4, where the bug cannot show, so these tests check the fix's mechanics: it is
installed once, a tiled loop over program-id bounds still computes the right answer through it,
and the interpreter's own restore step removes it after every launch.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from autokernel import interpreter_compat


@triton.jit
def _row_sums_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    begin = row * n_cols  # loop bounds derived from the program id: what numpy 2.4 broke
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(begin, begin + n_cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + offsets, mask=offsets < begin + n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(total))


def test_index_takes_one_element_and_refuses_a_vector() -> None:
    one = SimpleNamespace(handle=SimpleNamespace(data=np.array([7], dtype=np.int32)))
    assert interpreter_compat._index_of_one_element(one) == 7
    many = SimpleNamespace(handle=SimpleNamespace(data=np.array([1, 2])))
    with pytest.raises(ValueError):
        interpreter_compat._index_of_one_element(many)


@pytest.mark.parametrize("numpy_version, triton_version, needed", [
    ("2.3.5", "3.6.0", False), ("2.4.0", "3.6.0", True), ("2.4.6", "3.5.1", True),
    ("2.4.6", "3.7.0", False), ("3.0.0rc1", "3.6.0", True),
])
def test_needed_only_for_the_broken_pairs(numpy_version, triton_version, needed,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(np, "__version__", numpy_version)
    monkeypatch.setattr(triton, "__version__", triton_version)
    assert interpreter_compat.needs_fix() is needed


def test_fixed_loop_runs_and_is_undone_after_each_launch(device,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if device != "cpu":
        pytest.skip("the interpreter runs only without a GPU in this suite")
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", interpreter._patch_lang_tensor)
    monkeypatch.setattr(interpreter_compat, "needs_fix", lambda: True)
    # Under numpy >= 2.4 autokernel's import has installed it already; then only once more fails.
    installed_at_import = getattr(interpreter._patch_lang_tensor, "autokernel_fix", False)
    assert interpreter_compat.patch_triton_interpreter() is not installed_at_import
    assert interpreter_compat.patch_triton_interpreter() is False  # once per process

    index_before = getattr(tl.tensor, "__index__", None)
    x = torch.randn(3, 37)
    out = torch.empty(3)
    _row_sums_kernel[(3,)](x, out, 37, BLOCK=16)
    torch.testing.assert_close(out, x.sum(dim=1), atol=1e-5, rtol=1e-5)
    assert getattr(tl.tensor, "__index__", None) is index_before
