"""The judge's audit of timed outputs: which ones it compares in full, and the comparison.

Every output of a candidate's timed call lands in the judge's memory (GPU: the judge's slot,
copied right after the call's end event; CPU: bytes received right after the batch). After each
batch, outside the timed interval (the candidate process replied; on a GPU it is stopped), the
judge compares outputs of that batch in full with references it computes itself from the inputs
it made for those calls (`made`: the judge's own tensors; on a GPU the slots were checked equal to
them). No digest or figure of the candidate's is believed for this.

Which outputs (`AuditPlan`): on the CPU, every one (the interpreter's call costs far more than a
reference and a comparison). On a GPU, each output independently with probability p, drawn here
(`secrets.SystemRandom`; the choice never leaves this process): p = 1 while the shape's audits are
expected to fit AUDIT_SHARE_OF_BUDGET of its timing budget, else the share that fits (the mean cost
of the audits done so far, the calls the shape is expected to make), never below
MIN_AUDIT_FRACTION. A kernel wrong on m of a shape's timed calls escapes with probability at most
(1 - p)^m: 0 on the CPU; on a GPU, with p < 1 only when n c > B (n calls, c the cost of one
audit, B the budget), at most exp(-m B / (n c)) or 0.75^m (docs/harness.md states the figures).

`JudgeAudit` is a part of `autokernel.harness.judge_timing.JudgeTiming` (its base class).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import torch

from autokernel.harness.cases import Case
from autokernel.harness.compare import bits
from autokernel.harness.inputs import tensors
from autokernel.harness.verdict import Verdict
from autokernel.ops.spec import Inputs, Shape

AUDIT_SHARE_OF_BUDGET = 0.5  # GPU: a shape's audits may take this share of its timing budget
MIN_AUDIT_FRACTION = 0.25  # GPU: at least this share of the timed outputs, whatever they cost
MAX_UNVERIFIED_SHARE = 0.5

_perf_counter = time.perf_counter


class AuditPlan:
    """Which of one shape's timed outputs the judge compares (see the module docstring)."""

    def __init__(self, chooser: secrets.SystemRandom, every: bool, budget_s: float) -> None:
        self.chooser, self.every, self.budget_s = chooser, every, budget_s
        self.expected = 0  # timed calls the shape is expected to make (set after the pilot)
        self.offered = self.compared = 0
        self.spent_s = 0.0

    def fraction(self) -> float:
        """The probability the next output is compared."""
        if self.every or self.compared == 0 or self.expected <= 0:
            return 1.0
        per_audit = self.spent_s / self.compared
        if per_audit <= 0.0:
            return 1.0
        return min(1.0, max(MIN_AUDIT_FRACTION, self.budget_s / (self.expected * per_audit)))

    def choose(self) -> bool:
        self.offered += 1
        share = self.fraction()
        return share >= 1.0 or self.chooser.random() < share

    def spent(self, seconds: float) -> None:
        self.compared += 1
        self.spent_s += max(0.0, seconds)


class JudgeAudit:
    """The audit and the other per-batch checks of `JudgeTiming`; the attributes they read (the
    device, the spec, the report, `_reference`, `_check`...) are `Judge`'s."""

    def _audit_batch(self, shape: Shape, dtype: torch.dtype, where: str, seeds: Sequence[int],
                     made: Sequence[Inputs], outputs: Sequence[Any]) -> None:
        """The chosen outputs of one candidate batch, each compared in full with the reference
        of the inputs the judge made for its call."""
        from autokernel.harness.judge import Prepared

        for seed, inputs, out in zip(seeds, made, outputs):
            if not self.audit.choose():
                continue
            began = _perf_counter()
            ref = self._reference(inputs)
            if self.spec.outputs > 1:
                out_shape: Any = tuple(tuple(r.shape) for r in ref)
            else:
                out_shape = tuple(ref.shape)
            prepared = Prepared(Case("timing", shape, dtype, "audit"), seed, ref, out_shape,
                                self._expected_dtype(dtype))
            self._check(prepared, out, where, stage="timing", rule="replay",
                        prefix="an output produced while timing is wrong at ")
            self.audit.spent(_perf_counter() - began)

    def _check_inputs_kept(self, remote: Any, made: list[Inputs], where: str) -> None:
        """On a GPU the inputs are the judge's memory: it checks them itself."""
        if self.device.type != "cuda":
            return
        for slot, inputs in zip(remote.inputs, made):
            for now, then in zip(tensors(slot), tensors(inputs)):
                if not torch.equal(bits(now), bits(then)):
                    raise Verdict("REJECTED", "timing", f"input mutation at {where}: a timed "
                                  "call modified its inputs", "input-mutation")

    def _check_verified(self, remotes: list[Any], where: str) -> None:
        for remote in remotes:
            if remote.name == "candidate" and remote.batches and \
                    remote.unverified > MAX_UNVERIFIED_SHARE * remote.batches:
                raise Verdict("FAIL", "timing", f"the judge's clock could not bound the "
                              f"candidate's timing at {where}: in {remote.unverified} of its "
                              f"batches ({remote.batches} in all) its process says its host "
                              "fell behind the GPU even behind a long spin",
                              "timing-contradiction")
            if remote.unverified:
                self.report.notes.append(f"{where}: the host was behind the GPU in "
                                         f"{remote.unverified} of the {remote.name}'s batches "
                                         f"({remote.batches} in all)")
        if self.audit.compared < self.audit.offered:
            self.report.notes.append(f"{where}: {self.audit.compared} of the candidate's "
                                     f"{self.audit.offered} timed outputs compared in full")
