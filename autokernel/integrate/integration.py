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

# Routes decide once per call signature (`plans.call_signature`: shapes, strides, dtypes,
# devices, requires_grad, the grad mode, the other values themselves) and keep the decision, a
# *plan*: why such calls are left to PyTorch (a str), or a runner that calls the kernel on a
# call's values with nothing left to check.
Plan = Any  # a runner, or a str
# (route, args, kwargs) -> the values a module route's decision depends on, the call's and the
# module's (its weight, its eps), or why the call is not one it takes (a str). Reads nothing of
# the tensors: it runs on every call, before the plan is looked up.
ModuleInputs = Callable[[Any, tuple[Any, ...], Mapping[str, Any]], "tuple[Any, ...] | str"]
# (route, *values) -> a plan whose runner takes (*values) -> (output, None) when routed,
# (None, why not) otherwise (the kernel refused the inputs).
ModulePlanner = Callable[..., Plan]
# (kernel, func, args, kwargs, stats) -> (output, None) when routed, (None, why not) otherwise:
# decided on every call (a call whose decision is more than its signature: stand-ins).
CallHandler = Callable[..., tuple[Any, str | None]]
# (kernel, func, args, kwargs, stats) -> a plan whose runner takes (args, kwargs) -> Outcome.
CallPlanner = Callable[..., Plan]
# (module, kernel) -> route details, why a look-alike is not routed (a failed probe), or None.
Recognizer = Callable[[Any, Any], "dict[str, Any] | str | None"]


@dataclass(frozen=True)
class ModuleRoute:
    """Modules whose forward a kernel replaces (nn.RMSNorm, a SwiGLU MLP)."""

    recognize: Recognizer
    inputs: ModuleInputs
    plan: ModulePlanner
    # The module's whole forward is the kernel, so nothing inside it is routed separately.
    whole_forward: bool = False
    roles: tuple[str, ...] = ("",)  # the kernel roles that route modules (matmul: "linear")


@dataclass(frozen=True)
class CallRoute:
    """Torch functions a kernel takes inside its call sites (F.softmax, torch.matmul): a
    planner, decided once per call signature, or a handler, decided on every call (one that
    hands out stand-ins, or reads more than the signature: torch.max's caller)."""

    functions: tuple[Any, ...]
    handler: CallHandler | None = None
    plan: CallPlanner | None = None

    def __post_init__(self) -> None:
        if (self.handler is None) == (self.plan is None):
            raise ValueError("a CallRoute takes a handler or a planner, one of them")


@dataclass(frozen=True)
class FusedAddRoute:
    """Norm modules fed by a residual add the kernel fuses with them (add_rmsnorm): inside the
    kernel's scopes an `x + residual` is deferred (`residual_norm.PendingSum`), and a recognized
    norm module that receives one runs the kernel on its two operands."""

    recognize: Recognizer
    # (tap, pending sum) -> the values the decision depends on (x, residual, the norm's affine
    # tensors and eps), or why not.
    inputs: Callable[[Any, Any], "tuple[Any, ...] | str"]
    # (tap, *values) -> a plan whose runner takes (*values) -> ((y, h), None) when fused,
    # (None, why not) otherwise; the tap gives the pending sum its value, h.
    plan: ModulePlanner


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
