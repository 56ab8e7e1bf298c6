"""Red team 4, a13's class: a kernel wrong on a few of the calls the judge makes while timing.

The judge compares every timed output on the CPU (a budgeted random share, at least 25%, on a
GPU: `judge_audit`), per batch, outside the timed interval; the warm-up and the profiled call
are checked like any call. End to end on the interpreter (the smoke case, then the timing), and
the audit plan's arithmetic as units.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import DEVICE

from autokernel.harness import runner
from autokernel.harness.judge_audit import MIN_AUDIT_FRACTION, AuditPlan, JudgeAudit
from autokernel.harness.result import Status
from autokernel.harness.verdict import Verdict

RED_TEAM = Path(__file__).parent / "adversarial" / "judge"


def bench(name: str, tmp_path: Path) -> Any:
    # The scan off: its counter is on the device, which no run-time check but the audit sees.
    return runner.run_bench(RED_TEAM / name, device=DEVICE, timeout_s=300.0, quick=True,
                            cache_dir=tmp_path / "cache", only_stages=["smoke"],
                            static_scan=False)


@pytest.mark.skipif(DEVICE != "cpu", reason="call 7 is a timed call on the interpreter only")
def test_one_wrong_timed_call_is_caught_every_time(tmp_path: Path) -> None:
    # One wrong output among a shape's four timed calls: a sample of three missed it 1 run in 4.
    result = bench("rt4_wrong_on_one_timed_call.py", tmp_path)
    assert result.status is Status.FAIL and result.rule == "replay", result.reason
    assert result.stage == "timing"
    assert "an output produced while timing is wrong" in result.reason


def test_the_profiled_calls_output_is_checked(tmp_path: Path) -> None:
    result = bench("rt4_wrong_on_profiled_call.py", tmp_path)
    assert result.status is Status.FAIL and result.stage == "timing", result.reason
    assert "(profiled call)" in result.reason and "outside atol" in result.reason


# -- the plan: which outputs are compared --------------------------------------------------------

def test_the_cpu_compares_every_timed_output() -> None:
    plan = AuditPlan(random.Random(0), every=True, budget_s=1e-9)
    plan.expected = 10_000
    for _ in range(100):
        assert plan.choose()
        plan.spent(1.0)  # however long an audit takes
    assert plan.fraction() == 1.0


def test_a_gpu_compares_all_within_its_budget_and_a_share_past_it() -> None:
    plan = AuditPlan(random.Random(0), every=False, budget_s=0.5)
    assert plan.choose() and plan.fraction() == 1.0  # nothing measured yet: the pilot's, all
    plan.spent(0.001)
    plan.expected = 400  # 0.4 s of audits: within the budget
    assert plan.fraction() == 1.0
    plan.expected = 1000  # 1 s: half of them
    assert plan.fraction() == pytest.approx(0.5)
    plan.expected = 1_000_000  # never below the floor
    assert plan.fraction() == MIN_AUDIT_FRACTION
    plan.expected = 1000
    chosen = sum(plan.choose() for _ in range(20_000))
    assert 9_500 < chosen < 10_500


class _FakeJudge(JudgeAudit):
    def __init__(self, every: bool) -> None:
        self.audit = AuditPlan(random.Random(1), every=every, budget_s=0.0)
        self.spec = SimpleNamespace(outputs=1)
        self.device = torch.device("cpu")
        self.checked: list[tuple[int, Any]] = []

    def _reference(self, inputs: Any) -> torch.Tensor:
        return inputs[0].double().softmax(-1)

    def _expected_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return dtype

    def _check(self, prepared: Any, out: Any, where: str, **options: Any) -> None:
        self.checked.append((prepared.seed, out))
        if not torch.allclose(out.double(), prepared.ref, atol=1e-4):
            raise Verdict("FAIL", options["stage"], options["prefix"] + where, options["rule"])


def test_every_output_of_a_batch_is_compared_with_the_reference_of_its_own_inputs() -> None:
    judge = _FakeJudge(every=True)
    made = [(torch.randn(3, 8),) for _ in range(6)]
    outs = [x.softmax(-1) for (x,) in made]
    judge._audit_batch((3, 8), torch.float32, "timing [here]", list(range(6)), made, outs)
    assert [seed for seed, _ in judge.checked] == list(range(6))
    outs[4] = made[4][0].exp()  # one call in six unnormalised
    with pytest.raises(Verdict) as caught:
        judge._audit_batch((3, 8), torch.float32, "timing [here]", list(range(6)), made, outs)
    assert caught.value.rule == "replay" and "produced while timing is wrong" in caught.value.reason


def test_this_files_attacks_are_the_rt4_files_it_judges() -> None:
    # tests/test_redteam_judge.py names every other file of the directory.
    source = Path(__file__).read_text()
    for name in ("rt4_wrong_on_one_timed_call.py", "rt4_wrong_on_profiled_call.py"):
        assert (RED_TEAM / name).is_file() and f'"{name}"' in source
