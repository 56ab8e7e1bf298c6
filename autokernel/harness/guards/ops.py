"""Which aten ops a candidate may run, and the dispatcher tables they had before it existed."""

from __future__ import annotations

import torch

# aten ops a kernel_fn may run around its Triton launches, by overload-packet name. None of them
# computes a value from the inputs' values: they allocate, initialise, reshape, or move bytes.
ALLOWED_ATEN_OPS: frozenset[str] = frozenset({
    # Allocation and initialisation of outputs and scratch buffers (torch.empty/zeros/full...).
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "resize_",
    # Views and layout metadata: no data is read.
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "slice", "select", "unsqueeze", "squeeze", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "alias", "detach", "view_as", "unflatten", "flatten", "movedim",
    # Copies: making an input contiguous, or casting dtype (same device only, checked below).
    "contiguous", "clone", "copy_", "_to_copy", "to",
})

# Allocations whose memory is uninitialised: the recorder fills them with poison as they are
# made, so an output element the kernel never writes is always visible, whatever the allocator
# hands out (a stale buffer may hold an earlier answer: the reference's, or the kernel's own).
POISONED_ALLOCATIONS: frozenset[str] = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
})

# Ops that may move data between devices: allowed only when every tensor stays on the device.
DEVICE_CHECKED_OPS: frozenset[str] = frozenset({"copy_", "_to_copy", "to"})

# aten ops Triton's own launch path runs (the interpreter moves arguments into host storages and
# back; the GPU launcher runs none). Anything else inside a launch comes from a hook that a
# candidate installed (`JITFunction.add_pre_run_hook(torch.exp)`: a C function, so no frame of
# the candidate's file is on the stack to give it away).
TRITON_LAUNCH_OPS: frozenset[str] = frozenset({
    "empty", "empty_strided", "new_empty", "set_", "copy_", "_to_copy", "lift_fresh", "alias",
    "view", "as_strided", "detach",
})

# Tensor methods that hand a tensor's values to the host (Python numbers, lists, numpy arrays,
# dlpack capsules, storages, text).
HOST_READ_METHODS: frozenset[str] = frozenset({
    "numpy", "tolist", "item", "__array__", "__array_wrap__", "__dlpack__", "__float__",
    "__int__", "__index__", "__bool__", "__complex__", "__repr__", "__str__", "__format__",
    "untyped_storage", "storage", "_typed_storage", "__reduce_ex__", "__getstate__", "apply_",
    "map_", "map2_",
})

# The dispatcher's introspection, captured before any candidate exists (one that replaced them
# could make every table read as unchanged).
_DUMP_TABLE = torch._C._dispatch_dump_table
_ALL_OP_NAMES = torch._C._dispatch_get_all_op_names


def allowed_op_tables() -> tuple[frozenset[str], dict[str, str]]:
    """Every aten op's qualified name as of now (`aten::clone`, `aten::clone.out`), and the
    dispatcher table of each on the recorder's allow-lists."""
    names = frozenset(n for n in _ALL_OP_NAMES() if n.startswith("aten::"))
    allowed = ALLOWED_ATEN_OPS | TRITON_LAUNCH_OPS
    tables = {n: _DUMP_TABLE(n) for n in names
              if n.removeprefix("aten::").split(".")[0] in allowed}
    return names, tables


def dispatch_tables() -> dict[str, str]:
    """The dispatcher table (which kernel serves each dispatch key) of every aten op (0.3 to
    0.5 s on a busy CPU: a few thousand ops)."""
    return {n: _DUMP_TABLE(n) for n in _ALL_OP_NAMES() if n.startswith("aten::")}


# The tables as the fork server saw them after its warm-up (`remember_server_tables`), inherited
# by every process it forks: a candidate process's snapshot starts from them instead of dumping
# them again, so whatever changed them since (anything loaded before the candidate's import,
# the candidate's own CUDA library included) shows as a change.
_server_tables: dict[str, str] | None = None


def remember_server_tables() -> None:
    """In the fork server, once its imports and warm-up are done."""
    global _server_tables
    _server_tables = dispatch_tables()


def tables_before_candidates() -> dict[str, str]:
    """The fork server's tables when this process was forked from one, else dumped now."""
    return dict(_server_tables) if _server_tables is not None else dispatch_tables()
