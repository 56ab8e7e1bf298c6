"""The judge's step 4: have the candidate process time every contestant, then audit the timing.

The candidate process reports a digest of every timed output; only then are some of them chosen
at random (`AUDITS_PER_TIMED_SHAPE` per timed shape), their inputs remade in the judge, and the
kernel re-run on them with every detector armed: the re-run must be right, and bit for bit the
output that was timed. A kernel that computes something else while timed (a cheaper path once
the checked calls are over) fails here.

`TimingAudits` is a part of `autokernel.harness.judge.Judge` (its base class): it uses the judge's
cases, references and candidate channel.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import torch

from autokernel.harness import channel
from autokernel.harness.cases import Case, case_seed
from autokernel.harness.inputs import TIMED_CALL_STRIDE, generator
from autokernel.harness.outputs import outputs_digest
from autokernel.harness.verdict import Verdict
from autokernel.ops.spec import Shape, dtype_name

AUDITS_PER_TIMED_SHAPE = 3  # timed outputs re-run as guarded calls and compared bit for bit

_perf_counter = time.perf_counter


class TimingAudits:
    """Step 4 of `Judge.run`: the `time` request, then the audits of the timed outputs."""

    def _out_nbytes(self, shape: Shape, dtype: torch.dtype) -> int | list[int]:
        for prepared in self.prepared:
            if prepared.case.shape == shape and prepared.case.dtype == dtype:
                return prepared.out_nbytes
        return 0

    def _run_timing(self) -> None:
        started = _perf_counter()
        reply = self._ask("time", out_nbytes=[self._out_nbytes(s, d) for s, d in self.timed])
        self.report.phase_seconds["timing"] = round(_perf_counter() - started, 3)
        self.phase_started = _perf_counter()
        pools = reply.get("pools")
        if not isinstance(pools, list) or len(pools) != len(self.timed):
            raise channel.BadMessage("timing pools do not match the timed shapes")
        chooser = secrets.SystemRandom()
        for k, ((shape, dtype), pool) in enumerate(zip(self.timed, pools)):
            where = f"timing [{self.spec.format_shape(shape)}] {dtype_name(dtype)}"
            entries = _pool_entries(pool)
            if not entries:
                raise Verdict("FAIL", "timing", f"{where}: no timed call of the candidate was "
                              "reported", "replay")
            for index, digest in chooser.sample(entries, min(AUDITS_PER_TIMED_SHAPE,
                                                             len(entries))):
                self._audit(k, shape, dtype, index, digest, where)
        self._phase("audits")

    def _audit(self, k: int, shape: Shape, dtype: torch.dtype, index: int, digest: list[int],
               where: str) -> None:
        """Timed call `index`: its inputs remade here, the kernel re-run on them with every
        detector armed; the re-run must be right and have the timed output's digest."""
        seed = case_seed(self.timing_seed, TIMED_CALL_STRIDE * k + index)
        inputs = self._make(shape, dtype, generator(self.device, seed))
        prepared = self._prepare(Case("timing", shape, dtype, f"audit {index}"), seed, inputs)
        self._hand_over(inputs)
        del inputs
        out = self._call(prepared, f"{where} (audit re-run)")
        self._check(prepared, out, where, stage="timing", rule="replay",
                    prefix="an output produced while timing could not be reproduced by a "
                           "checked call on the same inputs, which is wrong at ")
        rerun = outputs_digest(out).tolist()
        del out
        self._ask("release")
        if rerun != digest:
            raise Verdict("FAIL", "timing", f"an output produced while timing differs bit for "
                          f"bit from a checked call on the same inputs at {where}: timed "
                          "calls compute something else", "replay")



def _pool_entries(pool: Any) -> list[tuple[int, list[int]]]:
    if not isinstance(pool, list):
        raise channel.BadMessage("a timing pool that is not a list")
    entries = []
    for entry in pool:
        if (not isinstance(entry, list) or len(entry) != 2 or type(entry[0]) is not int
                or not isinstance(entry[1], list)):
            raise channel.BadMessage("a malformed timing pool entry")
        entries.append((entry[0], entry[1]))
    return entries
