"""Will `autokernel verify` be able to splice a kernel in where the profiler found its calls?

The plan says so per call site, so that a target the loop would optimize for nothing is visible
before the night starts. The answer follows what `autokernel.integrate.patch` routes (its module
doc is the reference; `tests/test_profiler.py` checks the two agree on the fixture models):

- "module": the call is an nn.Module's whole forward (nn.Linear, nn.LayerNorm, nn.RMSNorm, a
  hand-written RMSNorm, a SwiGLU or GeGLU MLP module, a rotary module), routed after a probe where
  the module is hand-written;
- "call": a torch call the router intercepts (SDPA, softmax, F.cross_entropy, sum, matmul/bmm/mm
  /addmm);
- "call chain": explicit attention, softmax(q @ kᵀ · scale [causal mask]) @ v, deferred whole;
  an LM head's F.linear deferred into the F.cross_entropy it feeds (linear_cross_entropy:
  `logits_chain.py`);
  a residual add deferred into the norm module it feeds (add_rmsnorm, add_layernorm:
  `residual_norm.py`);
- "function?": RoPE inside a module that is no rotary module: routed if the rotation is a
  function rope(x, cos, sin) or (q, k, cos, sin) the module calls, not if it is written inline
  (the profile cannot tell);
- "no: <why>": nothing verify can route (F.layer_norm in a custom module, baddbmm, an SDPA with
  an attn_mask, log_softmax + nll_loss, ...);
- "?": the profile cannot tell (a kernel tied to no op; a module an old recording left out).

Plain Python on the recorded profile (no torch), like the classifier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from autokernel.profiling.classify import SiteKey
from autokernel.profiling.events import ModuleInfo

MODULE = "module"
CALL = "call"
CHAIN = "call chain"
FUNCTION = "function?"
UNKNOWN = "?"

LINEAR_TYPES = ("torch.nn.modules.linear.Linear",
                "torch.nn.modules.linear.NonDynamicallyQuantizableLinear")
LAYERNORM_TYPE = "torch.nn.modules.normalization.LayerNorm"
RMSNORM_TYPE = "torch.nn.modules.normalization.RMSNorm"
SDPA_NOTES = {"mask": "attn_mask", "kv_heads": "k/v heads differ from q's",
              "kv_len": "k/v length differs from q's"}
# Fused residual add + norm types, and the norm module verify taps for each.
FUSED_NORMS = {"add_rmsnorm": "nn.RMSNorm", "add_layernorm": "nn.LayerNorm"}
MATMUL_CALLS = {"batched": ("aten::matmul", "aten::bmm"),
                "gemm": ("aten::matmul", "aten::mm", "aten::addmm")}


def _type(modules: Mapping[str, ModuleInfo], path: str) -> str | None:
    info = modules.get(path)
    return info.type if info is not None else None


def _is_gated_mlp_module(modules: Mapping[str, ModuleInfo], path: str) -> bool:
    """Three nn.Linear children and no other child with weights (an nn.GELU may be there): what
    the fused_mlp route takes (its probe then decides, for the verified activation)."""
    if not path or path not in modules:
        return False
    children = [(p, info) for p, info in modules.items()
                if p.startswith(path + ".") and "." not in p[len(path) + 1:]]
    linears = [p for p, info in children if info.type in LINEAR_TYPES]
    others = [p for p, info in children if info.type not in LINEAR_TYPES and any(
        q.startswith(p + ".") or q == p for q, i in modules.items() if i.params)]
    return len(linears) == 3 and not others


def site_route(kernel_type: str, site: SiteKey, modules: Mapping[str, ModuleInfo]) -> str:
    """How verify would splice this call site's kernel in, or "no: why"."""
    op, notes, params = site.aten_op, dict(site.notes), dict(site.params)
    module_type = _type(modules, site.module)
    if op == "(no op recorded)":  # a GEMM kernel the profiler tied to no op: who called it?
        return UNKNOWN
    by_module = kernel_type in ("layernorm", "rmsnorm", "fused_mlp", "rotary_embedding") or (
        kernel_type == "matmul" and site.role == "linear")
    if by_module and module_type is None and not op.startswith("rmsnorm("):
        return UNKNOWN
    if kernel_type == "matmul":
        if site.role == "linear":
            return MODULE if module_type in LINEAR_TYPES else "no: F.linear outside nn.Linear"
        if op in MATMUL_CALLS.get(site.role, ()):
            return CALL
        return f"no: {op.removeprefix('aten::')} is not routed"
    if kernel_type == "flash_attention":
        if op.startswith("softmax(QK^T)V"):
            return CHAIN
        for key, why in SDPA_NOTES.items():
            if key in notes or key in params:
                return f"no: {why}"
        return CALL
    if kernel_type == "softmax":
        return "no: not over the last dim" if "dim" in params else CALL
    if kernel_type in FUSED_NORMS:
        norm = notes.get("norm", "module")
        return CHAIN if norm == "module" else f"no: {norm} outside {FUSED_NORMS[kernel_type]}"
    if kernel_type == "layernorm":
        return MODULE if module_type == LAYERNORM_TYPE else "no: F.layer_norm outside nn.LayerNorm"
    if kernel_type == "rmsnorm":
        if op.startswith("rmsnorm(") or module_type == RMSNORM_TYPE:
            return MODULE
        return "no: F.rms_norm outside nn.RMSNorm"
    if kernel_type == "fused_mlp":
        if _is_gated_mlp_module(modules, site.module):
            return MODULE
        return "no: gate/up/down are not the three Linears of one module"
    if kernel_type == "cross_entropy":
        if op != "aten::cross_entropy_loss":
            return "no: log_softmax + nll_loss (only F.cross_entropy is routed)"
        return _unrouted_loss_arguments(notes) or CALL
    if kernel_type == "linear_cross_entropy":
        return _lm_head_loss_route(notes)
    if kernel_type == "rotary_embedding":
        # On use: the op entry imports torch, and this module reads profiles without it.
        from autokernel.ops.rotary_embedding import is_rotary_module_name

        name = (module_type or "").rsplit(".", 1)[-1]
        if is_rotary_module_name(name):
            return MODULE
        return FUNCTION
    return CALL


def _lm_head_loss_route(notes: Mapping[str, Any]) -> str:
    """An LM head + loss site: deferred whole (`integrate/logits_chain.py`) when the loss is
    F.cross_entropy's mean over targets not -100 and the head has no bias."""
    if "loss" in notes:
        return f"no: {notes['loss']} (only F.cross_entropy is routed)"
    if notes.get("bias"):
        return "no: the LM head has a bias"
    return _unrouted_loss_arguments(notes) or CHAIN


def _unrouted_loss_arguments(notes: Mapping[str, Any]) -> str | None:
    """ "no: why" for F.cross_entropy arguments the kernels do not take, or None: they compute
    the mean over targets other than -100, without smoothing or class weights."""
    if notes.get("reduction", "mean") != "mean":
        return f"no: reduction={notes['reduction']}"
    if notes.get("ignore_index", -100) != -100:
        return f"no: ignore_index={notes['ignore_index']}"
    if "label_smoothing" in notes or "class_weights" in notes:
        return "no: label smoothing or class weights"
    return None


def _resolved_scale(scale: Any, shape: list[int]) -> float | None:
    """An attention's scale as the number it stands for (None: 1/sqrt(D), D the last dim)."""
    if scale is not None:
        return float(scale)
    return float(shape[-1]) ** -0.5 if shape and shape[-1] > 0 else None


def unverified_param(kernel_type: str, site_params: Mapping[str, Any], shape: list[int],
                     verified: Mapping[str, Any]) -> str | None:
    """ "no: why" for a site whose eps (norms), scale (attention) or activation (fused_mlp) is
    not the one the target's kernel is verified with: verify refuses such a call, since a tuned
    kernel may bake the value in (`autokernel.integrate.routing._unverified`), and a gated MLP
    of another activation fails the module probe. None when they agree or one is unknown."""
    if kernel_type == "fused_mlp":
        # SiLU is the default, which a SwiGLU site and a target verified for it leave unnamed.
        mine = site_params.get("activation", "silu")
        theirs = verified.get("activation", "silu")
        return None if mine == theirs else f"no: activation={mine} (verified: {theirs})"
    norms = ("rmsnorm", "layernorm", *FUSED_NORMS)
    if kernel_type in norms and "eps" in verified and "eps" in site_params:
        mine, theirs = site_params["eps"], verified["eps"]
        if None not in (mine, theirs) and not math.isclose(float(mine), float(theirs),
                                                            rel_tol=1e-6):
            return f"no: eps={float(mine):g} (verified: {float(theirs):g})"
    if kernel_type == "flash_attention" and "scale" in verified:
        mine = _resolved_scale(site_params.get("scale"), shape)
        theirs = _resolved_scale(verified["scale"], shape)
        if None not in (mine, theirs) and not math.isclose(mine, theirs, rel_tol=1e-5):
            return f"no: scale={mine:.4g} (verified: {theirs:.4g})"
    return None


def target_route(routes: Iterable[str]) -> str:
    """One cell for a target: its sites' answer, "part: ..." when only some can be routed."""
    distinct = list(dict.fromkeys(routes))
    if not distinct:
        return ""
    refused = [r for r in distinct if r.startswith("no")]
    taken = [r for r in distinct if not r.startswith("no")]
    if not refused:
        return " + ".join(taken)
    if not taken:
        return refused[0]
    return f"part: {' + '.join(taken)}; {refused[0]}"
