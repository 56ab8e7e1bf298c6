"""Route a model's modules and functional calls to the registered kernels: `patch_model`.

Six ways in, chosen by where PyTorch models call each kernel type:

- Modules, by overriding the instance's `forward` (parameters, state_dict keys, hooks and the
  module tree stay as they are; `unpatch` deletes the override):
  - nn.Linear → the matmul kernel of role "linear": x[..., K] @ Wᵀ + bias, with Wᵀ made
    contiguous once and cached until the weight changes (its storage or version) — not per
    call. Under autograd (a weight that needs a gradient) and under torch.compile the kernel
    reads Wᵀ as a strided view instead, so gradients reach the parameter and no copy is made;
  - nn.RMSNorm and hand-written RMSNorm modules → rmsnorm; nn.LayerNorm → layernorm;
  - SwiGLU MLP modules (three bias-free nn.Linear children, gate/up [H, D] and down [D, H]) →
    fused_mlp;
  - rotary modules, forward(q, k) → (q, k) with 2-D cos/sin tables → rotary_embedding.
  Structure alone does not route a hand-written module: a probe first runs its own forward on
  random inputs against the op's reference, in its own dtype and eps, and only a module that
  computes what the kernel computes is routed (a Gemma-style (1 + weight) norm, a GELU-gated MLP
  or a rotary module with offsets fail the probe and keep their forward).
- Functional calls (F.scaled_dot_product_attention → flash_attention, torch/F/Tensor softmax →
  softmax, F.cross_entropy → cross_entropy, torch/Tensor sum over the last dim → reduce,
  torch.matmul/bmm/`@` with a batched second operand → the matmul kernel of role "batched", with
  a 2-D one (and mm, addmm) → role "gemm"), through a TorchFunctionMode entered only inside the
  modules where the profiler found each kernel's calls (the plan's call sites; the whole model
  when none of them exists in it), and each kernel takes calls only inside its own sites. A mode
  sees every spelling of a call (`F.softmax`, `torch.softmax`, `x.softmax`, `q @ k`, a name
  imported with `from ... import`), which rebinding module attributes (`F.softmax = ...`) does
  not; it is scoped to this model's forward, so other models and threads are untouched; Dynamo
  traces through it, so the routing costs nothing under torch.compile; and scoping it to the
  call sites keeps its per-op Python cost in eager mode off the rest of the model. Inside the
  scopes that cost is paid by the model's own calls only: routes and kernels run their host code
  with torch-function handling off (`route_helpers.host_code`), and a call whose arguments
  cannot hold a stand-in skips the stand-in checks (`route_helpers.plain_arguments`).
- Explicit attention, softmax(q @ kᵀ · scale [causal mask]) @ v written out in torch calls →
  flash_attention, by deferring the scores inside the kernel's scopes (`attention_chain.py`).
- A residual add and the norm it feeds, `h = x + r; y = norm(h)` → add_rmsnorm (an RMSNorm) or
  add_layernorm (an nn.LayerNorm), by deferring the add inside the kernel's scopes and tapping
  the norm modules there (`residual_norm.py`).
- An LM head and its loss, `F.cross_entropy(lm_head(h).view(-1, V), t)` → linear_cross_entropy,
  by deferring the head's F.linear inside the kernel's scopes until the loss (`logits_chain.py`).
- A model's own RoPE function, rope(x, cos, sin) or (q, k, cos, sin), called from the modules
  where the profiler found the rotation → rotary_embedding, by rebinding the function's name
  where the forward looks it up, after a probe (`function_routes.py`).

Every call is routed only where the kernel supports it — a dtype the harness verified, the device
the kernels were built for, no autocast, the parameters it was verified with (causal, scale),
shapes it accepts — and otherwise runs the original code. `PatchReport` counts both, with the
reasons, and names what was found but not routed (a probe that failed, a site with nothing to
route) and why.

This file imports only torch (and the integrate modules above), because `autokernel export`
inlines it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# `autokernel export` inlines these modules (and drops these imports): plain names only.
from autokernel.integrate.attention_chain import (
    DEFERRED,
    NOT_MINE,
    follow_chain,
    holds_pending,
    realize_pending,
    start_chain,
)
from autokernel.integrate.custom_ops import load_kernel_module, register_kernel
from autokernel.integrate.function_routes import (
    FunctionRoute,
    RouteUser,
    Slot,
    route_rope_functions,
)
from autokernel.integrate.integration import Integration, ModuleRoute, Plan
from autokernel.integrate.routing import (  # noqa: F401 - RoutedKernel & co. are this API too
    DTYPES,
    PROBE_SEED,
    Outcome,
    PatchReport,
    RoutedKernel,
    RouteStats,
)
from autokernel.integrate.call_recording import _RECORDER
from autokernel.integrate.route_helpers import (
    UNDER_COMPILE,
    host_code,
    in_compiled_graphs,
    plain_arguments,
)
from autokernel.integrate.plans import call_signature, planned_call, remember, run_planner
from autokernel.integrate.logits_chain import (
    computed_arguments,
    defer_linear,
    follow_logits,
    holds_logits,
    realize_logits,
)
from autokernel.integrate.residual_norm import (
    FusedNormTap,
    defer_add,
    holds_sum,
    realize_sum,
    realize_sums,
    sum_value,
    value_of_sums,
)
from autokernel.interpreter_compat import patch_triton_interpreter  # inlined by export too

Handler = Callable[[RoutedKernel, Any, tuple[Any, ...], Mapping[str, Any], RouteStats], Outcome]


# ---------------------------------------------------------------------------------------------
# Module routes: each `_<type>_forward(route, args, kwargs)` returns an Outcome


class _Route:
    """A module's forward, sent to a kernel when the call fits and to the original otherwise.

    The route's decision is made once per call signature and kept (`plans.call_signature`):
    a later call of the same signature reads the module's inputs (`ModuleRoute.inputs`), looks
    its plan up and runs it."""

    def __init__(self, module: nn.Module, kernel: RoutedKernel, stats: RouteStats,
                 route: ModuleRoute, **details: Any) -> None:
        self.module = module
        self.kernel = kernel
        self.stats = stats
        self.inputs = route.inputs
        self.plan = route.plan
        self.details = details
        self.previous = module.__dict__.get("forward")  # an instance override we sit on
        self.cache: dict[str, Any] = {}  # what a route keeps between calls (Linear's Wᵀ)
        self.plans: dict[Any, Plan] = {}

    def original(self, *args: Any, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if holds_sum(args, kwargs):  # a deferred add (residual_norm.py) reaching another route
            args, kwargs = value_of_sums(args, kwargs)
        recorder = _RECORDER[0]  # verify times routed calls again (`recording_calls`)
        if recorder is not None:
            recorder.begin(self.kernel.tag)
        if torch.compiler.is_compiling():  # decided anew: Dynamo traces the checks
            out, reason = self.call(args, kwargs)
            if reason is None:
                return out
            return self.original(*args, **kwargs)
        # The route's checks and kernel call are no torch calls of the model's: with a Router's
        # mode on, torch-function handling is off for them.
        if torch._C._is_torch_function_mode_enabled():
            with host_code():
                out, reason = self._planned(args, kwargs)
        else:
            out, reason = self._planned(args, kwargs)
        if reason is None:
            # Through count_call, never `calls += 1`: the plan's splice check wraps it to
            # charge each call to its site (profiling/splice_check.py).
            self.stats.count_call()
            if recorder is not None:
                recorder.record_routed(self.kernel.tag, functools.partial(self, *args, **kwargs))
            return out
        self.stats.count_fallback(reason)
        return self.original(*args, **kwargs)

    def call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
        """The route on one call, planned for it alone: (output, None) or (None, why not)."""
        values = self.inputs(self, args, kwargs)
        if type(values) is str:
            return None, values
        plan = self.plan(self, *values)
        return (None, plan) if type(plan) is str else plan(*values)

    def _planned(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
        values = self.inputs(self, args, kwargs)
        if type(values) is str:
            return None, values
        key = call_signature(values) if not torch._C._is_any_autocast_enabled() else None
        if key is None:  # planned for this call alone (a subclass, autocast): as it always was
            with host_code():
                plan = self.plan(self, *values)
                return (None, plan) if type(plan) is str else plan(*values)
        plan = self.plans.get(key)
        if plan is None:
            plan = remember(self.plans, key, self.plan(self, *values))
        if type(plan) is str:
            return None, plan
        return plan(*values)


def _recognize(module: nn.Module, kernels: Mapping[str, RoutedKernel]
               ) -> tuple[str, dict[str, Any] | str] | None:
    """(kernel type, route details) for a module to route, (kernel type, why not) for a module
    that looks like one but fails its probe, None for anything else. Each op entry's recognizer
    claims only its own kind of module, so the order they are asked in does not matter."""
    for kernel_type, kernel in kernels.items():
        route = kernel.integration.module_route
        found = route.recognize(module, kernel) if route is not None else None
        if found is not None:
            return kernel_type, found
    return None


def routes_calls(kernel: RoutedKernel) -> bool:
    return kernel.role in kernel.integration.call_routes


def routes_modules(kernel: RoutedKernel) -> bool:
    route = kernel.integration.module_route
    return route is not None and kernel.role in route.roles


class Router(TorchFunctionMode):
    """Sends intercepted torch functions to kernels; everything else passes straight through.

    `depth` counts, per kernel tag, the kernel's scopes now running: a kernel takes calls only
    inside its own call sites (and a rope FunctionRoute reads the same counts)."""

    def __init__(self) -> None:
        super().__init__()
        # func -> (kernel, planner or None, handler, stats, that route's plans by signature)
        self.routes: dict[Any, list[tuple[RoutedKernel, Any, Handler, RouteStats,
                                          dict[Any, Plan]]]] = {}
        self.depth: dict[str, int] = {}
        self.entered = False  # the mode is on the stack (entered once, by the outermost scope)
        self.chains = False  # an explicit-attention route may hand out stand-ins
        self.sums = False  # a fused add + norm route may hand out stand-ins (residual_norm.py)
        self.logits = False  # an LM head + loss route may hand out stand-ins (logits_chain.py)
        self.stand_ins = False  # any of the three

    def add(self, kernel: RoutedKernel, stats: RouteStats) -> None:
        for route in kernel.integration.call_routes[kernel.role]:
            self.chains = self.chains or route.handler is start_chain
            self.sums = self.sums or route.handler is defer_add
            self.logits = self.logits or route.handler is defer_linear
            self.stand_ins = self.chains or self.sums or self.logits
            handler = route.handler or run_planner(route.plan)
            plans: dict[Any, Plan] = {}  # one route's, shared by its functions
            for func in route.functions:
                self.routes.setdefault(func, []).append(
                    (kernel, route.plan, handler, stats, plans))

    def __deepcopy__(self, memo: dict[int, Any]) -> Router:
        return self  # holds kernels and counters, no model state

    def replay(self, tag: str, func: Any, args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> Callable[[], Any]:
        """A routed torch call made again as the model made it: through this mode, inside the
        kernel's scope (the mode entered for the one call: a scope enters it once for all)."""

        def call_again() -> Any:
            self.depth[tag] = self.depth.get(tag, 0) + 1
            try:
                with self:
                    return func(*args, **kwargs)
            finally:
                self.depth[tag] -= 1

        return call_again

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        # Every torch call in the scopes comes here, tensor attribute reads included: the
        # stand-in checks only for calls with an argument that may be or hold a stand-in.
        if self.stand_ins and not plain_arguments(args, kwargs):
            if self.chains and holds_pending(args, kwargs):
                return follow_chain(func, args, kwargs)
            if self.logits and holds_logits(args, kwargs):
                out = follow_logits(func, args, kwargs, compute=False)
                if out is not NotImplemented:
                    return out
                # Computed as written; the call on the logits is then routed like any other.
                args, kwargs = computed_arguments(func, args, kwargs)
            if self.sums and holds_sum(args, kwargs):
                if func is sum_value:
                    return sum_value(*args, **kwargs)
                # Computed as written; the call itself is then routed like any other (an add of
                # a computed sum may start the next pair).
                args, kwargs = realize_sums(args, kwargs)
        routes = self.routes.get(func)
        if routes is None:
            return func(*args, **kwargs)
        refused: tuple[RouteStats, str] | None = None
        for kernel, planner, handler, stats, plans in routes:
            if not self.depth.get(kernel.tag):
                continue  # outside this kernel's call sites
            recorder = _RECORDER[0]  # verify times routed calls again (`recording_calls`)
            if recorder is not None:
                recorder.begin(kernel.tag)
            if planner is not None:
                out, reason = planned_call(kernel, planner, plans, func, args, kwargs, stats)
            else:
                out, reason = handler(kernel, func, args, kwargs, stats)
            if reason is None:
                stats.count_call()
                if recorder is not None:
                    recorder.record_routed(kernel.tag, self.replay(kernel.tag, func, args, kwargs))
                return out
            if reason == DEFERRED:
                return out
            if reason != NOT_MINE and refused is None:
                refused = (stats, reason)
        if refused is not None:
            refused[0].count_fallback(refused[1])
        return func(*args, **kwargs)


class _Scope:
    """A module's forward run inside some kernels' call sites: their depth counts go up, and
    the Router's mode is entered if these kernels route torch calls and it is not on yet.

    The mode is entered once per Router, by the outermost scope (a mode on the stack twice
    would see every call twice). So one thread at a time runs a patched model with its calls
    routed: a second thread inside the same patched model meanwhile runs them in PyTorch."""

    def __init__(self, module: nn.Module, router: Router, tags: frozenset[str],
                 needs_mode: bool) -> None:
        self.module = module
        self.router = router
        self.tags = tags
        self.needs_mode = needs_mode
        self.previous = module.__dict__.get("forward")

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        router = self.router
        for tag in self.tags:
            router.depth[tag] = router.depth.get(tag, 0) + 1
        try:
            if not self.needs_mode or router.entered:
                return self._forward(*args, **kwargs)
            router.entered = True
            try:
                with router:
                    out = self._forward(*args, **kwargs)
            finally:
                router.entered = False
            if type(out) is torch.Tensor or not router.stand_ins:
                return out  # no stand-in is, or is in, a plain tensor
            if router.chains and not torch.compiler.is_compiling():
                out = realize_pending(out, "returned by the forward")
            if router.logits and not torch.compiler.is_compiling():
                out = realize_logits(out, "returned by the forward")
            if router.sums:
                out = realize_sum(out)
            return out
        finally:
            for tag in self.tags:
                router.depth[tag] -= 1


# ---------------------------------------------------------------------------------------------
# Patching


def _outermost(paths: Iterable[str]) -> list[str]:
    """Drop every path that lies inside another one ("" is the whole model)."""
    chosen: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("."), p)):
        if not any(path == p or p == "" or path.startswith(p + ".") for p in chosen):
            chosen.append(path)
    return chosen


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or r == "" or path.startswith(r + ".") for r in roots)


class Patch:
    """A patched model: its report, and `unpatch()` to give every module its forward back."""

    def __init__(self, model: nn.Module, report: PatchReport, kernels: list[RoutedKernel]) -> None:
        self.model = model
        self.report = report
        self.kernels = kernels  # as routed here: `in_compiled_graphs` set for this patch
        self.router = Router()
        self._installed: list[tuple[nn.Module, Any]] = []  # (module, what forward was before)
        self._rebound: list[tuple[Slot, FunctionRoute, RouteUser]] = []  # rope functions

    def _install(self, module: nn.Module, forward: Any) -> None:
        self._installed.append((module, module.__dict__.get("forward")))
        module.forward = forward

    def unpatch(self) -> None:
        for module, previous in reversed(self._installed):
            if previous is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous
        self._installed.clear()
        for slot, route, user in reversed(self._rebound):
            slot.release(route, user)
        self._rebound.clear()


def _route_modules(patch: Patch, kernels: Mapping[str, RoutedKernel],
                   claimers: Iterable[RoutedKernel] = ()) -> set[str]:
    """Module routes, except for modules a call-route kernel claims (`claims_module`); returns
    the paths whose whole forward is now a kernel."""
    report, routed = patch.report, set()
    claimers = [k for k in claimers if k.integration.claims_module is not None]
    for path, module in list(patch.model.named_modules()):
        if any(path.startswith(r + ".") for r in routed if r):
            continue  # inside a module whose whole forward is already a kernel
        found = _recognize(module, kernels)
        if found is None:
            continue
        kernel_type, details = found
        kernel = kernels[kernel_type]
        stats = report.kernels[kernel.tag]
        claimer = next((k for k in claimers if k.integration.claims_module(k, module)), None)
        if claimer is not None:
            stats.skipped[path] = f"left to {claimer.label}"
            continue
        if isinstance(details, str):
            stats.skipped[path] = details
            continue
        route = kernel.integration.module_route
        patch._install(module, _Route(module, kernel, stats, route, **details))
        stats.modules.append(path)
        if route.whole_forward:
            routed.add(path)
    return routed


def _route_rope_functions(patch: Patch, kernel: RoutedKernel, whole: set[str],
                          modules: Mapping[str, nn.Module]) -> list[str]:
    """Function routes at the rotary kernel's call sites that no rotary module covers (every
    module of the model when none of the sites exists in it); returns the scope paths."""
    stats = patch.report.kernels[kernel.tag]
    sites = [s for s in kernel.sites if s in modules] or list(modules)
    sites = [s for s in sites if not _inside(s, whole) and not any(
        _inside(m, [s]) for m in stats.modules)]
    if not sites:
        return []
    explicit = any(s in modules for s in kernel.sites)
    done = route_rope_functions(patch.model, sites, kernel, stats, patch.router.depth)
    patch._rebound.extend(done.installed)
    if explicit:  # a profiled site with nothing to route is worth a line; any other module not
        stats.skipped.update(done.skipped)
    for name, paths in done.functions.items():
        stats.functions.append(f"{name} in {', '.join(paths)}")
    return done.scopes


def _tap_fused_norms(patch: Patch, kernel: RoutedKernel, modules: Mapping[str, nn.Module]) -> None:
    """The norm modules inside a fused add + norm kernel's scopes, each wrapped so that a pending
    residual add it receives runs the kernel (on top of any route already there)."""
    stats = patch.report.kernels[kernel.tag]
    fused = kernel.integration.fused_add
    for path, module in modules.items():
        if not _inside(path, stats.scopes):
            continue
        found = fused.recognize(module, kernel)
        if found is None:
            continue
        if isinstance(found, str):
            stats.skipped[path] = found
            continue
        patch._install(module, FusedNormTap(module, kernel, stats, fused, **found))
        stats.modules.append(path)
        stats.fused_widths.add(int(found["width"]))


def patch_model(model: nn.Module, kernels: Iterable[RoutedKernel],
                under_compile: str = "inductor", left_out: Iterable[str] = ()) -> Patch:
    """Route `model`'s matching modules and calls to `kernels`, in place; see the module doc.

    One kernel per kernel type routes modules (matmul: the first of role "linear"); every kernel
    whose (type, role) routes torch calls takes them in its own call sites, a call going to the
    first kernel that takes it. `under_compile`: "inductor" (the default) leaves every call to
    the original code while torch.compile traces, so a compiled patched model is the compiled
    original; "transparent" puts the compile-transparent kernels (triton_ops, whose launches
    Inductor sees and fuses around) into compiled graphs and leaves the opaque ones (custom
    ops) to Inductor; "kernels" puts every kernel into compiled graphs. `left_out`: tags of
    kernels left to Inductor under torch.compile whatever the mode (verify's rule).
    """
    if under_compile not in UNDER_COMPILE:
        raise ValueError(f"under_compile must be one of {', '.join(UNDER_COMPILE)}, "
                         f"not {under_compile!r}")
    left_out = frozenset(left_out)
    kernels = [dataclasses.replace(k, in_compiled_graphs=in_compiled_graphs(
        k, under_compile, left_out)) for k in kernels]
    if any(isinstance(m.__dict__.get("forward"), (_Route, _Scope, FusedNormTap))
           for m in model.modules()):
        raise ValueError("this model is already patched; call unpatch() on its Patch first")
    report = PatchReport({k.tag: RouteStats(k.tag, k.kernel_type, k.op.backward,
                                            functional=routes_calls(k),
                                            compile_path=k.op.compile_label,
                                            in_compiled_graphs=k.in_compiled_graphs)
                          for k in kernels})
    patch = Patch(model, report, kernels)
    module_kernels: dict[str, RoutedKernel] = {}
    for kernel in kernels:
        if routes_modules(kernel):
            module_kernels.setdefault(kernel.kernel_type, kernel)
        elif not routes_calls(kernel):
            report.kernels[kernel.tag].skipped[""] = f"no route for {kernel.label}"
    claimers = [k for k in kernels if routes_calls(k)]
    whole = _route_modules(patch, module_kernels, claimers) if module_kernels else set()

    modules = dict(model.named_modules())
    scopes: dict[str, set[str]] = {}
    mode_tags: set[str] = set()
    for kernel in kernels:
        if not routes_calls(kernel):
            continue
        stats = report.kernels[kernel.tag]
        patch.router.add(kernel, stats)
        sites = [s for s in kernel.sites if s in modules]
        stats.scopes = _outermost(sites or [""])
        mode_tags.add(kernel.tag)
        for path in stats.scopes:
            scopes.setdefault(path, set()).add(kernel.tag)
    for kernel in kernels:
        if kernel.integration.fused_add is not None and routes_calls(kernel):
            _tap_fused_norms(patch, kernel, modules)
    for kernel in module_kernels.values():
        if kernel.integration.function_routes:
            for path in _outermost(_route_rope_functions(patch, kernel, whole, modules)):
                scopes.setdefault(path, set()).add(kernel.tag)
    for path in sorted(scopes, key=lambda p: (p.count("."), p)):
        tags = frozenset(scopes[path])
        patch._install(modules[path], _Scope(modules[path], patch.router, tags,
                                             needs_mode=bool(tags & mode_tags)))
    return patch


# ---------------------------------------------------------------------------------------------
# From a manifest (what `autokernel.load` and an exported module both hold) to routed kernels


class KernelLoadError(RuntimeError):
    """A kernel cannot be loaded for the requested device; the message is one line."""


def prepare_device(device: str) -> None:
    """Make kernels loaded from now on run on `device`: "cuda", or "cpu" (Triton interpreter)."""
    import os

    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        patch_triton_interpreter()
    elif device == "cuda":
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise KernelLoadError("TRITON_INTERPRET=1 is set, so the kernels would run in the "
                                  "CPU interpreter; unset it, or load for device 'cpu'")
        if not torch.cuda.is_available():
            raise KernelLoadError("no CUDA GPU is visible to torch; load for device 'cpu' to run "
                                  "the kernels in the Triton interpreter")
    else:
        raise KernelLoadError(f"unknown device {device!r}; choose cuda or cpu")


def build_kernels(entries: Iterable[Mapping[str, Any]], sources: Mapping[str, str],
                  references: Mapping[str, Callable[..., torch.Tensor]],
                  integrations: Mapping[str, Integration], device: str, module_prefix: str,
                  filenames: Mapping[str, str] | None = None,
                  compile_transparent: bool | None = None) -> list[RoutedKernel]:
    """Execute each manifest entry's kernel source, register it as a triton_op or custom op
    (`compile_transparent`: see `custom_ops.choose_compile_path`) with its op entry's
    integration (schema, fake, backward, routes), describe it."""
    prepare_device(device)
    kernels = []
    for entry in entries:
        tag = entry["tag"]
        source = sources[tag]
        filename = (filenames or {}).get(tag) or f"<{module_prefix}:{tag}>"
        try:
            module = load_kernel_module(f"{module_prefix}_{tag}", source, filename)
            kernel_fn = module.kernel_fn
        except Exception as exc:  # a kernel file edited by hand, or a missing dependency
            first = (str(exc).strip().splitlines() or [""])[0]
            raise KernelLoadError(f"the kernel {tag} ({filename}) does not load: "
                                  f"{type(exc).__name__}: {first}") from None
        kernel_type = entry["kernel_type"]
        integration = integrations[kernel_type]
        # Probes and recompute backwards use it; a kernel type whose oracle is in its op entry,
        # not reference.py, is absent from an export's references and needs neither.
        reference = references.get(kernel_type)
        dtype = DTYPES[entry["dtypes"][0]] if entry.get("dtypes") else torch.float16
        op = register_kernel(kernel_type, kernel_fn, source, integration, reference, module,
                             compile_transparent, dtype)
        kernels.append(RoutedKernel.from_manifest(entry, op, reference))
    return kernels
