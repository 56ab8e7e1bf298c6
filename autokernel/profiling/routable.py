"""Will `autokernel verify` be able to splice a kernel in where the profiler found its calls?

The plan says so per call site, so that a target the loop would optimize for nothing is visible
before the night starts. The answer follows what `autokernel.integrate.patch` routes (its module
doc is the reference; `tests/test_profiler.py` checks the two agree on the fixture models), and
each kernel type gives it for its own sites, in its op entry (`autokernel/ops/<type>.py`):

- `OpSpec.site_route`: "module" (an nn.Module's whole forward), "call" (a torch call the router
  intercepts), "call chain" (a call deferred whole into the call it feeds), "function?" (routed
  if the model calls a function, not if it writes the code inline), "?" (the profile cannot
  tell) or "no: <why>" (`site_routes` names these words). A type that declares none is routed as
  the call it is: "call".
- `OpSpec.param_mismatch`: "no: <why>" for a site whose params (a norm's eps, an attention's
  scale, a gated MLP's activation) are not the ones the target's kernel is verified with.

Plain Python on the recorded profile, like the classifier: the op entries (which import torch)
load on first use, as the classifier's rules do (`op_rules`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autokernel.profiling.callsites import SiteKey
from autokernel.profiling.events import ModuleInfo
from autokernel.profiling.site_routes import CALL, UNKNOWN

if TYPE_CHECKING:
    from autokernel.ops.spec import OpSpec

NO_OP = "(no op recorded)"  # a GEMM kernel the profiler tied to no op: who called it is unknown


def _registered(kernel_type: str) -> OpSpec | None:
    """The type's op entry; None for a type the registry does not know (an old recording's)."""
    from autokernel import ops

    return ops.get_spec(kernel_type) if kernel_type in ops.KERNEL_TYPES else None


def site_route(kernel_type: str, site: SiteKey, modules: Mapping[str, ModuleInfo]) -> str:
    """How verify would splice this call site's kernel in, or "no: why"."""
    if site.aten_op == NO_OP:
        return UNKNOWN
    spec = _registered(kernel_type)
    if spec is None or spec.site_route is None:
        return CALL
    info = modules.get(site.module)
    return spec.site_route(site, info.type if info is not None else None, modules)


def unverified_param(kernel_type: str, site_params: Mapping[str, Any], shape: list[int],
                     verified: Mapping[str, Any]) -> str | None:
    """ "no: why" for a site whose params are not the ones the target's kernel is verified with:
    verify refuses such a call, since a tuned kernel may bake the value in
    (`autokernel.integrate.route_helpers.unverified_value`). None when they agree or one is
    unknown."""
    spec = _registered(kernel_type)
    if spec is None or spec.param_mismatch is None:
        return None
    return spec.param_mismatch(site_params, shape, verified)


def target_route(routes: Iterable[str]) -> str:
    """One cell for a target: its sites' answer, "part: ..." when only some can be routed (a
    site of which only some calls are, "part: call; no: why", counts as both)."""
    distinct = list(dict.fromkeys(routes))
    if not distinct:
        return ""
    refused = [r for r in distinct if r.startswith("no")]
    taken = [r for r in distinct if not r.startswith("no")]
    for route in [r for r in taken if r.startswith("part: ") and "; no" in r]:
        word, _, why = route.removeprefix("part: ").partition("; ")
        taken[taken.index(route)] = word
        refused.append(why)
    taken = list(dict.fromkeys(taken))
    refused = list(dict.fromkeys(refused))
    if not refused:
        return " + ".join(taken)
    if not taken:
        return refused[0]
    return f"part: {' + '.join(taken)}; {refused[0]}"
