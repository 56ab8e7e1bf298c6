"""The words `routable` answers in, and the checks several op entries' route hooks share.

Each kernel type says in its op entry how verify would splice one of its call sites in
(`OpSpec.site_route`) and which of a site's params must equal the verified ones
(`OpSpec.param_mismatch`); `routable` asks it. What more than one type reads lives here, so that
the op entries can import it and `routable` needs no op entry to load (plain Python, no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MODULE = "module"  # an nn.Module's whole forward, routed (after a probe where hand-written)
CALL = "call"  # a torch call the router intercepts
CHAIN = "call chain"  # a call deferred whole into the call it feeds
FUNCTION = "function?"  # routed if the model calls a function, not if the code is inline
UNKNOWN = "?"  # the profile cannot tell

LINEAR_TYPES = ("torch.nn.modules.linear.Linear",
                "torch.nn.modules.linear.NonDynamicallyQuantizableLinear")


def unrouted_loss_arguments(notes: Mapping[str, Any]) -> str | None:
    """ "no: why" for F.cross_entropy arguments the kernels do not take, or None: they compute
    the mean over targets other than -100, without smoothing or class weights."""
    if notes.get("reduction", "mean") != "mean":
        return f"no: reduction={notes['reduction']}"
    if notes.get("ignore_index", -100) != -100:
        return f"no: ignore_index={notes['ignore_index']}"
    if "label_smoothing" in notes or "class_weights" in notes:
        return "no: label smoothing or class weights"
    return None


def eps_mismatch(site_params: Mapping[str, Any], shape: list[int],
                 verified: Mapping[str, Any]) -> str | None:
    """A norm's `param_mismatch`: verify refuses a call whose eps is not the verified one, since
    a tuned kernel may bake the value in (`autokernel.integrate.route_helpers.unverified_value`)."""
    if "eps" not in verified or "eps" not in site_params:
        return None
    mine, theirs = site_params["eps"], verified["eps"]
    if None in (mine, theirs) or math.isclose(float(mine), float(theirs), rel_tol=1e-6):
        return None
    return f"no: eps={float(mine):g} (verified: {float(theirs):g})"
