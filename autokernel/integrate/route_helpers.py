"""The public helpers of routes, for the op entries' integration sections and the routes of
integrate/: may this call go to the kernel, and how to call it.

- the checks: `call_refusal` (compiling, dtype, device, autocast), `unverified_value` and
  `attention_scale_unverified` (a parameter the harness did not verify), `verified_over_an_axis`,
  `input_over_one_dim`, `in_compiled_graphs`;
- the call: `call_kernel` (the registered custom op under autograd or the compiler, the plain
  kernel function otherwise; `kernel_running` while it runs), and for a plan made once per call
  signature (`plans.py`) `kernel_caller` and `over_axis_caller`, that choose the way in once;
  `as_rows`, `axis_view`, `host_code`;
- a torch function's arguments: `bind_arguments` against a fixed signature (`REQUIRED` marks a
  parameter without default), `only_tensor_argument`, `plain_arguments`;
- a module route's probe: `probe_tensor`, `probe_close`, `probe_passes`, and what a module's
  forward takes: `positional_arity`, `plain_linear`, `affine_or_constant`.

Like routing.py it imports only torch: `autokernel export` inlines it.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from autokernel.integrate.call_recording import _RECORDER  # verify's replay of routed calls
from autokernel.integrate.routing import PROBE_SEED, Outcome, RoutedKernel
from autokernel.integrate.triton_ops import TRITON_OP

# ---------------------------------------------------------------------------------------------
# Checks shared by every route


UNDER_COMPILE = ("inductor", "transparent", "kernels")  # patch_model's choices
LEFT_TO_INDUCTOR = "under torch.compile: left to Inductor"


def in_compiled_graphs(kernel: RoutedKernel, under_compile: str, left_out: frozenset[str]) -> bool:
    """Whether torch.compile puts the kernel into its graphs: "kernels" every kernel,
    "transparent" the triton_ops only, "inductor" none; a tag in `left_out` never."""
    if kernel.tag in left_out:
        return False
    if under_compile == "transparent":
        return kernel.op.compile_path == TRITON_OP
    return under_compile == "kernels"


def call_refusal(kernel: RoutedKernel, *tensors: torch.Tensor) -> str | None:
    """Why these tensors cannot go to the kernel (compiling, dtype, device, autocast), or None."""
    if torch.compiler.is_compiling() and not kernel.in_compiled_graphs:
        return LEFT_TO_INDUCTOR
    first = tensors[0]
    for t in tensors:
        if t.dtype != first.dtype:
            return "mixed dtypes"
    if first.dtype not in kernel.dtypes:
        return f"dtype {str(first.dtype).removeprefix('torch.')} not verified"
    first_device = first.device
    device = first_device.type
    # A loop, not any() over a generator: the LM head + loss route checks every call.
    scattered = False
    for t in tensors:
        if t.device != first_device:
            scattered = True
            break
    if device != kernel.op.device_type or scattered:
        return f"tensors on {device}, kernels built for {kernel.op.device_type}"
    if torch.is_autocast_enabled(device):
        return "autocast"  # the module would run in the autocast dtype, the kernel would not
    return None


def _needs_custom_op(args: tuple[Any, ...]) -> bool:
    """Autograd or the compiler needs the registered op; plain eager inference does not."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def host_code() -> Any:
    """A context for our own eager host code inside a model's forward (a kernel's allocations,
    shape reads and launch; a route's checks): torch-function handling off, so that a Router's
    mode, on for the whole forward when a kernel's call sites include the model itself, does
    not take each of its torch calls and tensor attribute reads through Python (~20 per routed
    call: most of a routed call's host time). Eager only: under torch.compile nothing comes
    here, the registered op is called instead."""
    return torch._C.DisableTorchFunction()


# Argument types that never are, nor hold, a route's stand-in (residual_norm's PendingSum,
# attention_chain's PendingScores, logits_chain's PendingLogits): a call made of these alone
# needs none of the stand-in checks. Nearly every call a Router sees is one (each torch call of
# the model inside its scopes, and each tensor attribute read there).
PLAIN_ARGUMENT_TYPES = frozenset({
    torch.Tensor, nn.Parameter, int, float, bool, complex, str, type(None), type(Ellipsis),
    slice, torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format,
})


def plain_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> bool:
    """Whether every argument's type is a PLAIN_ARGUMENT_TYPES one (exactly: a subclass of them
    may be anything)."""
    for value in args:
        if type(value) not in PLAIN_ARGUMENT_TYPES:
            return False
    if kwargs:
        for value in kwargs.values():
            if type(value) not in PLAIN_ARGUMENT_TYPES:
                return False
    return True


_RUNNING = [0]  # kernel calls under way: the torch calls of their host code are not the model's


def kernel_running() -> bool:
    """Is a routed kernel running now (its host code, or the Triton interpreter, calling torch)?
    A route that would take any torch call (a deferred add) leaves those alone."""
    return _RUNNING[0] > 0


def call_kernel(kernel: RoutedKernel, *args: Any) -> Outcome:
    """Run the kernel; an input it rejects (ValueError/NotImplementedError) is left to PyTorch."""
    if kernel.op.direct is None or _needs_custom_op(args):
        return _call_registered(kernel, *args)
    return _call_direct(kernel, *args)


def _call_registered(kernel: RoutedKernel, *args: Any) -> Outcome:
    """The kernel through its registered op: autograd and the compiler see it."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_bare(kernel, args)
    _RUNNING[0] += 1
    try:
        return kernel.op.op(*args), None
    except (ValueError, NotImplementedError) as exc:
        return None, _kernel_refusal(exc)
    finally:
        _RUNNING[0] -= 1


def _call_direct(kernel: RoutedKernel, *args: Any) -> Outcome:
    """The kernel's plain function, without the dispatcher, with torch-function handling off
    for its host code when a mode is on (a Router's: `host_code`)."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_bare(kernel, args)
    _RUNNING[0] += 1
    try:
        if torch._C._is_torch_function_mode_enabled():
            with host_code():
                return kernel.op.direct(*args), None  # type: ignore[misc]
        return kernel.op.direct(*args), None  # type: ignore[misc]
    except (ValueError, NotImplementedError) as exc:
        return None, _kernel_refusal(exc)
    finally:
        _RUNNING[0] -= 1


def _kernel_refusal(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"kernel refused: {first[:80]}"


def kernel_caller(kernel: RoutedKernel, *tensors: torch.Tensor) -> Callable[..., Outcome]:
    """How a plan calls the kernel for calls of its signature: through the registered op where
    autograd or the compiler needs it (`_needs_custom_op` of these tensors, decided now: grad
    mode and requires_grad are part of the signature), the plain function otherwise."""
    if kernel.op.direct is None or _needs_custom_op(tensors):
        return functools.partial(_call_registered, kernel)
    return _direct_caller(kernel)


def _direct_caller(kernel: RoutedKernel) -> Callable[..., Outcome]:
    """`_call_direct` for one kernel, with what it reads of the kernel and of torch looked up
    once, when the plan is made: a planned call pays no partial, attribute chain or global
    lookup on top of the kernel's own host code (each ~0.1 µs, on every routed call)."""
    direct = kernel.op.direct
    assert direct is not None  # kernel_caller checked
    recorder, running = _RECORDER, _RUNNING
    mode_enabled, no_torch_function = (torch._C._is_torch_function_mode_enabled,
                                       torch._C.DisableTorchFunction)

    def call(*args: Any) -> Outcome:
        if recorder[0] is not None:
            recorder[0].record_bare(kernel, args)
        running[0] += 1
        try:
            if mode_enabled():  # a Router's mode: its torch calls are not the model's
                with no_torch_function():
                    return direct(*args), None
            return direct(*args), None
        except (ValueError, NotImplementedError) as exc:
            return None, _kernel_refusal(exc)
        finally:
            running[0] -= 1

    return call


def only_tensor_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        return args[0]
    if not args and len(kwargs) == 1:
        value = next(iter(kwargs.values()))
        return value if isinstance(value, torch.Tensor) else None
    return None


def as_rows(x: torch.Tensor, width: int) -> torch.Tensor:
    # A 2-D input already is its rows: the same tensor, without the ~1.5 µs of host time a view
    # costs on every routed call.
    if x.dim() == 2 and x.shape[1] == width:
        return x
    return x.reshape(-1, width)


REQUIRED = object()


def bind_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any],
          names: tuple[str, ...], defaults: tuple[Any, ...]) -> dict[str, Any] | None:
    """Python's argument binding for a fixed signature; None for a call that does not fit it."""
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return None
    bound = dict(zip(names, defaults))
    bound.update(zip(names, args))
    for k, v in kwargs.items():
        if k in names[: len(args)]:
            return None
        bound[k] = v
    if any(v is REQUIRED for v in bound.values()):
        return None
    return bound


def _last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and ndim > 0 and dim in (-1, ndim - 1)


def _one_dim(dim: Any, ndim: int) -> int | None:
    """The one dim a reduction's `dim` argument names, made non-negative; None for none (all
    dims), several, or one out of range."""
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < ndim:
        return None
    return dim % ndim


def verified_over_an_axis(kernel: RoutedKernel) -> bool:
    """Was the kernel verified over a dim that is not the last (its target's `axis` param)?
    Such a kernel passed the harness at (M, N, K > 1) shapes, so it sums/normalizes over any dim
    given the [outer, N, inner] view; a last-dim kernel (and every kernel of a run made before
    axes) is verified at K = 1 only."""
    axis = kernel.params.get("axis", -1)
    return isinstance(axis, int) and axis != -1


def _axis_refusal(kernel: RoutedKernel, axis: int, ndim: int) -> str | None:
    """Why a call over dim `axis` (non-negative) may not go to the kernel, or None."""
    if axis == ndim - 1 or verified_over_an_axis(kernel):
        return None
    return f"over dim {axis} of {ndim}; the kernel was verified over the last dim only"


def input_over_one_dim(kernel: RoutedKernel,
                       bound: Mapping[str, Any] | None) -> tuple[torch.Tensor, int] | str:
    """A bound `(input, dim, ...)` call's tensor and the one dim it works over (non-negative),
    or why the call does not go to the kernel."""
    if bound is None:
        return "arguments"
    x = bound["input"]
    if not isinstance(x, torch.Tensor) or x.ndim == 0:
        return "arguments"
    axis = _one_dim(bound["dim"], x.ndim)
    if axis is None:
        return "not over one dim"
    return _axis_refusal(kernel, axis, x.ndim) or (x, axis)


def axis_view(x: torch.Tensor, axis: int) -> torch.Tensor:
    """x as [outer, N, inner] for an op over dim `axis`: the reference's axis 1 (a view when x's
    dims after and before the axis each merge, a copy otherwise)."""
    shape = x.shape
    return x.reshape(math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))


def over_axis_caller(kernel: RoutedKernel, x: torch.Tensor, axis: int,
                     *trailing: Any) -> Callable[[torch.Tensor], Outcome]:
    """A plan's call of a single-input kernel over dim `axis` of tensors of x's signature:
    `(x) -> Outcome`, on x's rows when that is the last dim (the signature every kernel takes;
    a 2-D x is its rows), else on the [outer, N, inner] view with the axis argument 1.
    `trailing` arguments (reduce's op) follow the axis, which is then passed at the last dim too
    (-1). The output is the kernel's, in the shape of what it was given."""
    call = kernel_caller(kernel, x)
    if axis == x.ndim - 1:
        width, extra = x.shape[-1], ((-1, *trailing) if trailing else ())
        if x.ndim == 2:  # x already is its rows: the kernel's call itself, without a wrapper
            return (lambda x: call(x, *extra)) if extra else call
        return lambda x: call(x.reshape(-1, width), *extra)
    shape = x.shape
    view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
    return lambda x: call(x.reshape(view), 1, *trailing)


def unverified_value(kernel: RoutedKernel, name: str, value: float | None) -> str | None:
    """Why a continuous parameter differs from the one the harness verified the kernel with (a
    tuned kernel may have baked that value in), or None. Unknown to the manifest: any value."""
    if name not in kernel.params:
        return None
    verified = kernel.params[name]
    same = (value is None and verified is None) or (
        value is not None and verified is not None
        and math.isclose(float(value), float(verified), rel_tol=1e-6))
    return None if same else f"{name}={value:g} (verified: {verified})" if value is not None \
        else f"{name} default (verified: {verified})"


def attention_scale_unverified(kernel: RoutedKernel, scale: float | None,
                               head_dim: int) -> str | None:
    """Why an attention's scale (None: 1/sqrt(D)) is not the one the harness verified the kernel
    with, compared as the numbers they stand for (a profiled 0.125 is the default at D = 64)."""
    if "scale" not in kernel.params:
        return None
    default = head_dim ** -0.5
    verified = kernel.params["scale"]
    expected = default if verified is None else float(verified)
    actual = default if scale is None else float(scale)
    if math.isclose(actual, expected, rel_tol=1e-5):
        return None
    return f"scale={actual:.4g} (verified: {expected:.4g})"


def probe_tensor(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(PROBE_SEED)  # leaves the global RNG alone
    return torch.randn(shape, generator=generator).to(device=like.device, dtype=like.dtype)


def probe_close(kernel: RoutedKernel, out: Any, ref: torch.Tensor) -> bool:
    """Relative L2 error within the op's rtol for the dtype: scale-free, so a module whose
    outputs happen to be small (a freshly initialized MLP in fp16) is judged like any other."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return False
    atol, rtol = kernel.tolerances.get(ref.dtype, (1e-2, 1e-2))
    out64, ref64 = out.double(), ref.double()
    scale = ref64.norm().item()
    error = (out64 - ref64).norm().item()
    return error <= (rtol * scale if scale > 0 else atol)


def probe_passes(check: Callable[[], bool]) -> bool:
    """Run a module probe without autograd; a module that cannot even run it is not ours."""
    with torch.no_grad():
        try:
            return check()
        except Exception:
            return False


# ---------------------------------------------------------------------------------------------
# What module routes ask of a module


def _forward_parameters(module: nn.Module) -> list[inspect.Parameter] | None:
    try:
        signature = inspect.signature(type(module).forward)
    except (TypeError, ValueError):
        return None
    return list(signature.parameters.values())[1:]  # without self


def positional_arity(module: nn.Module) -> int | None:
    """How many positional parameters forward takes, when it takes nothing else."""
    parameters = _forward_parameters(module)
    if parameters is None:
        return None
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in plain or p.default is not inspect.Parameter.empty for p in parameters):
        return None
    return len(parameters)


def plain_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward


def affine_or_constant(tensor: torch.Tensor | None, route: Any, name: str, width: int,
             like: torch.Tensor, fill: float) -> torch.Tensor:
    """The module's affine tensor, or a constant cached on the route when it has none."""
    if tensor is not None:
        return tensor
    key = (name, width, like.dtype, like.device)
    if route.cache.get(name + "_key") != key:
        route.cache[name] = torch.full((width,), fill, dtype=like.dtype, device=like.device)
        route.cache[name + "_key"] = key
    return route.cache[name]
