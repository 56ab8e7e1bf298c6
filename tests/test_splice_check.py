"""The plan's "verify splices" column asked of verify's own routes (`splice_check.py`): where the
op entries' static rules and verify disagree, the column says what verify does.

That the column then is what verify does with real kernels is checked by the consistency tests
that splice the starter kernels in (tests/test_profiler.py on the fixture models,
tests/test_op_styles.py on the held-out styles, the three below among them).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from autokernel.profiling import model_loader
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.plan import Plan
from autokernel.profiling.profiler import profile_model
from autokernel.profiling.ranking import build_plan
from autokernel.profiling.splice_check import check_splices

REPO = Path(__file__).resolve().parents[1]
STYLES = REPO / "tests" / "op_styles"
MODELS = REPO / "tests" / "fixtures" / "models"


def static_and_checked(path: Path) -> tuple[Plan, Plan]:
    loaded = load_model_file(path, device="cpu")
    static = build_plan(profile_model(loaded, warmup=0, iters=1), model=path.stem,
                        class_name="Model")
    checked = copy.deepcopy(static)
    assert check_splices(checked, loaded) is None
    return static, checked


# (style, kernel type, what the op entry's rule said, what verify's routes do)
DISAGREEMENTS = [
    # T5 casts the scores (type_as) before the softmax: the attention chain refuses it.
    ("attention_t5_unscaled", "flash_attention", "call chain", "no: attention chain: scores "
                                                               "used by type_as"),
    # eps added outside the root, as x * rsqrt(mean(x²) + eps) computes it too: the probe passes.
    ("rmsnorm_norm_scale", "rmsnorm", "no: eps is added outside the root", "module"),
    # A norm whose weight is called `scale`: no route recognizes the module.
    ("rmsnorm_sqrt_div", "rmsnorm", "module", "no: verify's routes take none of its calls"),
]


@pytest.mark.parametrize("style, kind, said, does", DISAGREEMENTS,
                         ids=[d[0] for d in DISAGREEMENTS])
def test_the_column_says_what_verify_does_where_the_rules_said_otherwise(
        style: str, kind: str, said: str, does: str) -> None:
    static, checked = static_and_checked(STYLES / f"{style}.py")
    before = next(t for t in static.targets if t.kernel_type == kind)
    after = next(t for t in checked.targets if t.kernel_type == kind)
    assert before.route.startswith(said)
    assert after.route == does
    assert all(site.route == does for site in after.call_sites)


def test_function_routes_are_known_after_the_check() -> None:
    """The rules say "function?" for a rotation verify routes only if the model calls a rope
    function; the check knows: a function here, written inline there."""
    _, called = static_and_checked(MODELS / "rope_function.py")
    _, inline = static_and_checked(MODELS / "rope_inline.py")
    rotary = {p: next(t for t in plan.targets if t.kernel_type == "rotary_embedding")
              for p, plan in (("called", called), ("inline", inline))}
    assert rotary["called"].route == "function"
    assert rotary["inline"].route.startswith("no: no function rope(x, cos, sin)")


def test_no_forward_runs_when_no_route_finds_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target only module routes take, in a model with no module they recognize (a norm whose
    weight is `scale`; a GRU's linears), costs the check no forward: a slow model's plan pays
    nothing for it."""
    loaded = load_model_file(STYLES / "rmsnorm_sqrt_div.py", device="cpu")
    plan = build_plan(profile_model(loaded, warmup=0, iters=1), model="m", class_name="Model")
    forwards = []
    monkeypatch.setattr(model_loader, "call_forward", lambda *a: forwards.append(a))
    assert check_splices(plan, loaded) is None
    assert forwards == []
    assert plan.targets[0].route.startswith("no")


def test_a_check_that_cannot_run_leaves_the_rules_answer_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autokernel.integrate import patch

    loaded = load_model_file(MODELS / "swiglu.py", device="cpu")
    plan = build_plan(profile_model(loaded, warmup=0, iters=1), model="m", class_name="Model")
    before = [t.route for t in plan.targets]

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a route that cannot be built")

    monkeypatch.setattr(patch, "patch_model", broken)
    note = check_splices(plan, loaded)
    assert note == "verify's routes were not asked: RuntimeError: a route that cannot be built"
    assert [t.route for t in plan.targets] == before


def test_a_target_of_partly_taken_sites_is_one_part_cell() -> None:
    from autokernel.profiling.routable import target_route

    assert target_route(["part: call; no: eps=1e-06 (verified: 1e-05)"]) == \
        "part: call; no: eps=1e-06 (verified: 1e-05)"
    assert target_route(["module", "part: module; no: shape"]) == "part: module; no: shape"
    assert target_route(["no: attn_mask", "part: call; no: scale"]) == \
        "part: call; no: attn_mask"
    assert target_route(["module", "call chain"]) == "module + call chain"
