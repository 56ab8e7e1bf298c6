"""Keep the Triton interpreter (`--device cpu`) working with numpy >= 2.4 on triton < 3.7.

numpy 2.4 turned `int()` of a one-element 1-d array from a deprecation warning into a TypeError.
Triton 3.6's interpreter converts a loop bound that way whenever a kernel writes
`for k in range(start, end, STEP)` with `start` or `end` derived from `tl.program_id`, so every
such kernel (the matmul, fused_mlp and flash_attention starters, and most agent-written tiled
kernels) dies with "only 0-dimensional arrays can be converted to Python scalars". Seen on the GPU
machine, whose numpy is newer than CI's pin; upstream fixed it after 3.6 (triton-lang/triton#9171).

The interpreter patches `tl.tensor` for the length of each launch through its private
`_patch_lang_tensor(tensor, scope)` and undoes it through `scope`. The fix wraps that function and
registers one more attribute through the same scope, so it is undone with the others.
"""

from __future__ import annotations

from typing import Any

FIXED_IN_TRITON = (3, 7)
BROKEN_FROM_NUMPY = (2, 4)


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _index_of_one_element(self: Any) -> int:
    # .item() accepts any one-element array and still refuses a real vector, as int() did.
    return int(self.handle.data.item())


def needs_fix() -> bool:
    import numpy
    import triton

    return (_release(numpy.__version__) >= BROKEN_FROM_NUMPY
            and _release(triton.__version__) < FIXED_IN_TRITON)


def patch_triton_interpreter() -> bool:
    """Install the fix once per process when this numpy/triton pair needs it; True if installed."""
    if not needs_fix():
        return False
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "autokernel_fix", False):
        return False

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index_of_one_element)

    _patch_lang_tensor.autokernel_fix = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = _patch_lang_tensor
    return True
