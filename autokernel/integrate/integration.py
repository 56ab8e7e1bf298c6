"""What a kernel type's op entry tells the integration layer: `Integration`.

Each `autokernel/ops/<kernel_type>.py` ends with a section, after `INTEGRATION_MARKER`, that
defines `INTEGRATION`: the custom op's schema, fake and backward, and the routes that send a
model's modules and torch calls to a finished kernel of that type. `custom_ops.register_kernel`
and `patch.patch_model` read only this record, so they hold no per-type tables.

That section imports only torch and the integrate modules, because `autokernel export` ships it
(with the op file's non-autokernel imports) into the exported module, where it runs with the
inlined integrate modules' names in scope. This file imports only torch, for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

INTEGRATION_MARKER = "# --- integration: torch only below; `autokernel export` ships this part ---"

# (route, args, kwargs) -> (output, None) when routed, (None, why not) otherwise.
ModuleForward = Callable[[Any, tuple[Any, ...], Mapping[str, Any]], tuple[Any, str | None]]
# (kernel, func, args, kwargs, stats) -> the same.
CallHandler = Callable[..., tuple[Any, str | None]]
# (module, kernel) -> route details, why a look-alike is not routed (a failed probe), or None.
Recognizer = Callable[[Any, Any], "dict[str, Any] | str | None"]


@dataclass(frozen=True)
class ModuleRoute:
    """Modules whose forward a kernel replaces (nn.RMSNorm, a SwiGLU MLP)."""

    recognize: Recognizer
    forward: ModuleForward
    # The module's whole forward is the kernel, so nothing inside it is routed separately.
    whole_forward: bool = False
    roles: tuple[str, ...] = ("",)  # the kernel roles that route modules (matmul: "linear")


@dataclass(frozen=True)
class CallRoute:
    """Torch functions a kernel takes inside its call sites (F.softmax, torch.matmul)."""

    functions: tuple[Any, ...]
    handler: CallHandler


@dataclass(frozen=True)
class FusedAddRoute:
    """Norm modules fed by a residual add the kernel fuses with them (add_rmsnorm): inside the
    kernel's scopes an `x + residual` is deferred (`residual_norm.PendingSum`), and a recognized
    norm module that receives one runs the kernel on its two operands."""

    recognize: Recognizer
    # (tap, pending sum) -> (the norm's output, None) when fused, (None, why not) otherwise;
    # a fused call also gives the pending sum its value, h.
    forward: Callable[[Any, Any], tuple[Any, str | None]]


@dataclass(frozen=True)
class Integration:
    schema: str
    """The custom op's schema: the reference's positional signature."""
    fake: Callable[..., Any]
    """Output shape and dtype without running anything, for torch.compile (a tuple of them for
    a schema with several outputs)."""
    backward: str
    """"analytic" (`gradient`, closed form in PyTorch ops) or "recompute" (differentiates
    `recompute`, or the reference when None, at the saved inputs)."""
    gradient: Callable[..., tuple[Any, ...]] | None = None
    recompute: Callable[..., torch.Tensor] | None = None
    module_route: ModuleRoute | None = None
    call_routes: Mapping[str, tuple[CallRoute, ...]] = field(default_factory=dict)
    """Torch-function routes by kernel role ("" for kernel types without roles)."""
    function_routes: bool = False
    """The model's own functions are routed too (rotary: rope(x, cos, sin), function_routes.py)."""
    fused_add: FusedAddRoute | None = None
    """A residual add deferred into the norm module it feeds (`residual_norm.py`)."""
    example: Callable[[torch.dtype], tuple[Any, ...]] | None = None
    """Small CPU arguments of the schema in a dtype, on which registration traces a kernel's
    host code to decide whether it can be a compile-transparent triton_op (`triton_ops.py`);
    None: it stays a custom_op."""
    claims_module: Callable[[Any, nn.Module], bool] | None = None
    """(kernel, module) -> whether this kernel's call routes need the module's own forward to
    run (an LM head whose F.linear the linear_cross_entropy route defers): no other kernel's
    module route takes such a module."""
