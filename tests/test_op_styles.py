"""Held-out op styles: one-op model files written in the styles of public model code (HF
transformers, Meta llama, minGPT, nanoGPT, T5, timm, ConvNeXt, GPT-J, torchtitan, KernelBench),
each naming what the profiler must find in it (`EXPECTED` in the file, tests/op_styles/).

For each file the plan must have a target of the expected kernel type, with the expected calls
per forward and, at every call site of that target, the expected params (a site's params and
notes together: `kv_heads` is a note); the expected route ("module", "no", ...) when the file
names one; and no target of any other type than the file allows (`also`): no piece of an op
the profiler did not recognize (a norm's mean, a softmax's sum) may become a target. A look-alike
that computes no kernel type's op (the Annotated Transformer's std-based norm) names
`kernel_type` None: the plan must have no target but those `also` allows.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.plan import Plan
from autokernel.profiling.session import profile_plan

STYLES = Path(__file__).resolve().parent / "op_styles"
FILES = sorted(STYLES.glob("*.py"))


def expected_of(path: Path) -> dict[str, Any]:
    return _module(path).EXPECTED


def _same(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, float) and isinstance(found, (int, float)):
        return math.isclose(found, wanted, rel_tol=1e-4, abs_tol=1e-12)
    return found == wanted


def problems(plan: Plan, expected: dict[str, Any]) -> list[str]:
    """What the plan gets wrong against the file's EXPECTED; [] when it is all right."""
    kind = expected["kernel_type"]
    targets = [t for t in plan.targets if t.kernel_type == kind]
    found = [f"{t.label} {t.share:.0%}" for t in plan.targets]
    if kind is None:
        extra = [t.label for t in plan.targets if t.kernel_type not in expected.get("also", ())]
        return [f"unexpected targets: {extra}"] if extra else []
    if not targets:
        return [f"no {kind} target (targets: {found}, other: "
                f"{[o['op'] for o in plan.other_ops[:4]]})"]
    wrong: list[str] = []
    calls = sum(t.calls for t in targets)
    if calls != expected.get("calls", 1):
        wrong.append(f"{kind}: {calls} calls, expected {expected.get('calls', 1)}")
    for target in targets:
        for site in target.call_sites:
            seen = {**site.notes, **site.params}
            for name, value in expected.get("params", {}).items():
                if not _same(seen.get(name), value):
                    wrong.append(f"{kind} at {site.module or '<model>'}: {name}="
                                 f"{seen.get(name)!r}, expected {value!r}")
    route = expected.get("route")
    if route is not None and not all(t.route.startswith(route) for t in targets):
        wrong.append(f"{kind}: route {[t.route for t in targets]}, expected {route}")
    allowed = {kind, *expected.get("also", ())}
    extra = [t.label for t in plan.targets if t.kernel_type not in allowed]
    if extra:
        wrong.append(f"unexpected targets: {extra}")
    return wrong


def style_plan(path: Path) -> Plan:
    """The plan `autokernel profile` makes, its splice column asked of verify's routes."""
    loaded = load_model_file(path, device="cpu")
    return profile_plan(loaded, model=path.stem, class_name="Model", warmup=0, iters=1,
                        compiled=False)[1]


def known_miss(path: Path) -> str | None:
    """A style file's `KNOWN_MISS`: why the profiler does not recognize it yet (None: it does)."""
    return getattr(_module(path), "KNOWN_MISS", None)


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"op_style_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MISSED = [p for p in FILES if known_miss(p)]


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=known_miss(p))) if known_miss(p)
    else p for p in FILES], ids=[p.stem for p in FILES])
def test_op_style_is_recognized(path: Path) -> None:
    assert problems(style_plan(path), expected_of(path)) == []


@pytest.mark.parametrize("path", MISSED, ids=[p.stem for p in MISSED])
def test_a_known_miss_leaves_no_fragment_as_a_target(path: Path) -> None:
    """An op the profiler does not recognize yet: no piece of it (its max, its sum, its exp)
    may become a target; only what the file allows (`also`) may."""
    allowed = set(expected_of(path).get("also", ()))
    assert [t.kernel_type for t in style_plan(path).targets
            if t.kernel_type not in allowed] == []


def test_the_style_set_covers_every_family() -> None:
    """At least 70 files, and every kernel type the issue's styles name."""
    kinds = {expected_of(p)["kernel_type"] for p in FILES}
    assert len(FILES) >= 70
    assert {"rmsnorm", "layernorm", "softmax", "gelu", "flash_attention", "fused_mlp",
            "rotary_embedding", "cross_entropy", "linear_cross_entropy", "add_rmsnorm",
            "add_layernorm", "reduce"} <= kinds


# Styles whose targets verify's routes are run against (kept few: each builds and patches a
# model with the starter kernels in the Triton interpreter).
SPLICED = ["gelu_new_mingpt", "gelu_erf_formula", "attention_mingpt", "attention_hf_repeat_kv",
           "attention_sdpa_repeat_interleave", "attention_einsum", "mlp_phi3_fused_chunk",
           "mlp_silu_sigmoid", "rmsnorm_gemma", "rmsnorm_channels", "ce_class_dim",
           "lmhead_tied_matmul", "add_rmsnorm_inplace", "reduce_max_values", "reduce_max_index",
           "reduce_max_unpacked", "softmax_exp_amax",
           # where the op entries' rules and verify's routes disagree (tests/test_splice_check.py)
           "attention_t5_unscaled", "rmsnorm_norm_scale", "rmsnorm_sqrt_div",
           "fresh_mlp_geglu_separate", "rope_bshd_module", "layernorm_over_three_dims"]


@pytest.mark.parametrize("name", SPLICED)
def test_the_splice_column_is_what_verify_does(name: str, tmp_path: Path) -> None:
    """Each target's starter kernel spliced in by verify's own routes: a target the plan calls
    routable takes every profiled call, a "no" none (the profiler's own consistency check,
    tests/test_profiler.py, on the held-out styles)."""
    import autokernel
    from fabricated_run import fabricate_run
    from test_profiler import run_state_targets

    from autokernel.profiling.model_loader import run_forward

    run, plan = fabricate_run(STYLES / f"{name}.py", tmp_path / "run")
    kernels = autokernel.load(run, device="cpu")
    loaded = load_model_file(STYLES / f"{name}.py", device="cpu")
    patch = kernels.patch(loaded.model)
    try:
        run_forward(loaded)
    finally:
        patch.unpatch()
    stats = {s.tag: s for s in patch.report.kernels.values()}
    for tag, target in zip(run_state_targets(run), plan.targets):
        calls = stats[tag].calls
        if target.route.startswith("no"):
            assert calls == 0, (target.label, target.route, calls)
        elif target.route.startswith("part"):
            assert 0 < calls < target.calls, (target.label, target.route, calls)
        elif target.route != "function?":
            assert calls == target.calls, (target.label, target.route, calls, stats[tag])
