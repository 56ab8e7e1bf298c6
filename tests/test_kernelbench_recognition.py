"""KernelBench problems the profiler must recognize (issue 28): each fixture in
tests/fixtures/kernelbench/ is one problem's op in the problem's own call spelling and init
inputs, at a CPU-test shape. Profiled as `autokernel profile` profiles it (`profile_plan`), the
plan's top target must be the problem's kernel type with the problem's params, hold most of the
time, and be one verify's routes splice in (the plan's "verify splices" column); and verify,
given the starter kernel of that type, must take every profiled call of it.

The level 3 GRUs (39, 41) have no kernel type: they time the profiler (tests/test_profile_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from autokernel.profiling.model_loader import load_model_file, run_forward
from autokernel.profiling.plan import Plan, Target
from autokernel.profiling.session import profile_plan

KERNELBENCH = Path(__file__).resolve().parent / "fixtures" / "kernelbench"


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem: its fixture and the target its plan must rank first."""

    fixture: str
    kernel_type: str
    params: dict[str, Any] = field(default_factory=dict)
    # The other targets the plan may (for a block: must) have, by kernel type.
    others: tuple[str, ...] = ()
    # Least share of the model's time the target holds: most of a one-op problem's.
    min_share: float = 0.5
    # Whether it is the plan's first target (a block's targets are ranked by the CPU's figures).
    ranked_first: bool = True


PROBLEMS = [
    Problem("l1_23_softmax", "softmax"),
    Problem("l1_26_gelu", "gelu", {"approximate": "none"}),
    Problem("l1_36_rmsnorm", "rmsnorm", {"axis": 1, "eps": 1e-5}),
    Problem("l1_40_layernorm", "layernorm", {"eps": 1e-5}),
    Problem("l1_47_sum_reduction", "reduce", {"axis": 1}),
    Problem("l1_49_max_reduction", "reduce", {"axis": 1, "op": "amax"}),
    Problem("l1_88_mingpt_new_gelu", "gelu", {"approximate": "tanh"}),
    Problem("l1_95_cross_entropy", "cross_entropy"),
    Problem("l1_97_sdpa", "flash_attention", {"causal": False}),
    # The qkv and output projections are the only other work. Attention holds most of the
    # forward at the problem's size (82.9% in the plan of an H200 run,
    # docs/benchmarks/in-context-h200/kb43-run-ca774c9.txt), but a test-sized block's CPU
    # figures move with the machine's load (13% to 68% seen in busy and idle suites): found and
    # spliceable here, its share not checked.
    Problem("l3_43_mingpt_causal_attention", "flash_attention", {"causal": True, "scale": 0.25},
            others=("matmul",), min_share=0.0, ranked_first=False),
    # A whole block: its attention, GELU and norms are each found, none holding most of it.
    Problem("l3_44_minigpt_block", "flash_attention", {"causal": True, "scale": 0.25},
            others=("gelu", "matmul", "layernorm", "add_layernorm"), min_share=0.0,
            ranked_first=False),
]
IDS = [p.fixture for p in PROBLEMS]


def problem_named(fixture: str) -> Problem:
    return next(p for p in PROBLEMS if p.fixture == fixture)


def kernelbench_plan(fixture: str) -> Plan:
    """The plan `autokernel profile --device cpu` makes of the fixture, routes asked."""
    path = KERNELBENCH / f"{fixture}.py"
    loaded = load_model_file(path, device="cpu")
    return profile_plan(loaded, model=fixture, class_name="Model", warmup=0, iters=1,
                        compiled=False)[1]


def expected_target(plan: Plan, problem: Problem) -> Target:
    found = [t for t in plan.targets if t.kernel_type == problem.kernel_type]
    assert len(found) == 1, [(t.label, t.share) for t in plan.targets]
    return found[0]


def spliceable(route: str) -> bool:
    """Whether the plan's "verify splices" value says verify takes every call of the target:
    "module", "call", "call chain", not "no: ...", "part: ...", "?" (module not recorded) or
    "function?" (a function verify may or may not reach)."""
    return route in ("module", "call", "call chain")


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_the_problem_is_recognized_and_spliceable(problem: Problem) -> None:
    plan = kernelbench_plan(problem.fixture)
    target = expected_target(plan, problem)
    allowed = {problem.kernel_type, *problem.others}
    assert {t.kernel_type for t in plan.targets} <= allowed, \
        [(t.label, t.share) for t in plan.targets]
    if problem.ranked_first:
        assert plan.targets[0] is target
    if problem.others:  # every other target it names is found too
        assert {t.kernel_type for t in plan.targets} == allowed
    assert target.share > problem.min_share, (target.label, target.share)
    assert target.calls == 1
    for site in target.call_sites:
        assert {name: site.params.get(name) for name in problem.params} == \
            pytest.approx(problem.params), site.params
        assert spliceable(site.route), (site.module, site.route)
    assert spliceable(target.route), target.route


def test_the_blocks_attention_is_one_causal_target_in_its_module() -> None:
    """KernelBench 44: the masked attention is one causal flash_attention target at the `attn`
    module (not its matmuls, softmax or mask as pieces). Which of the block's targets ranks
    first is not checked here: at a CPU test's sizes the shares are per-op overheads, and an
    earlier share comparison failed one run in three on an idle machine."""
    plan = kernelbench_plan("l3_44_minigpt_block")
    causal = expected_target(plan, problem_named("l3_44_minigpt_block"))
    assert causal.params.get("causal") is True
    assert [site.module for site in causal.call_sites] == ["attn"]


@pytest.mark.parametrize("fixture", IDS)
def test_verify_splices_the_problems_target(fixture: str, tmp_path: Path) -> None:
    """verify's routes, given the starter kernel of every target, take each profiled call of the
    problem's target, and the patched model computes what the model does."""
    import autokernel
    from fabricated_run import fabricate_run
    from test_profiler import run_state_targets

    problem = problem_named(fixture)
    run, plan = fabricate_run(KERNELBENCH / f"{fixture}.py", tmp_path / "run")
    kernels = autokernel.load(run, device="cpu")
    loaded = load_model_file(KERNELBENCH / f"{fixture}.py", device="cpu")
    expected = run_forward(loaded)
    patch = kernels.patch(loaded.model)
    try:
        spliced = run_forward(loaded)
    finally:
        patch.unpatch()
    torch.testing.assert_close(spliced, expected, atol=1e-4, rtol=1e-4)
    calls = {s.tag: s.calls for s in patch.report.kernels.values()}
    for tag, target in zip(run_state_targets(run), plan.targets):
        if target.kernel_type == problem.kernel_type:
            assert calls[tag] == target.calls, (tag, calls)
