"""The judge's timing: every contestant timed in interleaved batches, bounded by the judge's clock.

Contestants: the candidate and the incumbent, each in its own sandboxed process (`Endpoint`), and
eager, torch.compile and Liger, run here in the judge (trusted code, no candidate near them). Each
batch holds one contestant's calls (`timing.run_batch`: a spin, then per call an L2 flush, an
event, the call, an event; one synchronize); each round of batches runs the contestants in a
random order, so drift hits all alike, and round r of each pairs with round r of the others.

For a candidate process, the judge owns every timed call's inputs and outputs: it makes the
inputs itself from keyed-hash seeds (`seeds.timed_call_seed`) and, on a GPU, puts them in
dedicated allocations it shares once per shape (slots); each output is copied into a slot of the
judge's right after its call. After each batch, outside the timed interval, the judge compares the
batch's outputs in full with references it computes from its own inputs: every output on the CPU,
on a GPU each with a probability it draws itself (`judge_audit`). No digest or figure of the
candidate's is believed for this.

The judge's clock bounds every batch a candidate process reports (`judge_clock`: the bounds, the
spin the judge grants); the flush and copy costs are measured by the judge
on its own GPU context. A contradicted batch is re-run
(fresh inputs) up to twice; a third contradiction is a FAIL (rule timing-contradiction). Batches
whose host fell behind even after the spin was doubled twice cannot be bounded this way; if more
than half of a shape's candidate batches end like that, the timing is a FAIL too. What a process
could still hide is bounded by its spin and the slack, per batch: docs/harness.md says more.

`JudgeTiming` is a part of `autokernel.harness.judge.Judge` (its base class).
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from autokernel.harness import channel
from autokernel.harness.cases import Case
from autokernel.harness.dedicated import DedicatedBuffer, share_like
from autokernel.harness.inputs import generator, tensors
from autokernel.harness.judge_channel import CandidateGone, Endpoint
from autokernel.harness.judge_audit import AUDIT_SHARE_OF_BUDGET, AuditPlan, JudgeAudit
from autokernel.harness.judge_clock import ProcessClock, check_batch_clock, next_spin
from autokernel.harness.outputs import clone_outputs
from autokernel.harness.paired import paired_speedup, round_ratios, too_noisy
from autokernel.harness.protocol import TimedShape, baseline_key
from autokernel.harness.seeds import derive_seed, timed_call_seed
from autokernel.harness.timing import (
    BATCH_INPUT_BYTES, MAX_CALLS_PER_BATCH, MAX_ROUNDS, MIN_SPIN_US, Spinner,
    SyncedCalls, calls_per_round_for, hidden_work_reason, iqr, make_flush_buffer, median,
    rounds_for, run_batch, synced_calls,
)
from autokernel.harness.untrusted import (
    NOTE_CHARS, UntrustedValueError, candidate_number, candidate_numbers, candidate_text,
)
from autokernel.harness.verdict import Verdict
from autokernel.ops.spec import Inputs, Shape, dtype_name
from autokernel.text import count_of

WALL_RETRIES = 2
BATCH_ATTEMPTS = 3

_perf_counter = time.perf_counter


@dataclass
class Remote:
    """A contestant in a process of its own, with the judge's slots at the current shape."""

    name: str
    endpoint: Endpoint
    spin_us: float = MIN_SPIN_US
    inputs: list[Inputs] = field(default_factory=list)  # GPU: the shared input slots
    outputs: list[list[torch.Tensor]] = field(default_factory=list)  # GPU: the output slots
    buffers: list[DedicatedBuffer] = field(default_factory=list)
    batches: int = 0
    unverified: int = 0
    synced: SyncedCalls | None = None


@dataclass
class Local:
    """A baseline run here, in the judge's own process."""

    name: str
    fn: Callable[..., Any]
    spin_us: float = MIN_SPIN_US
    synced: SyncedCalls | None = None


class JudgeTiming(JudgeAudit):
    """Step 3 of `Judge.run`."""

    # -- baselines, in this process ---------------------------------------------------------------

    def _prepare_baselines(self) -> None:
        """torch.compile of the stock path per timed shape (compiled and warmed here: no
        candidate can reach it), and Liger where installed; the figures cached from an earlier
        call are used as they are."""
        self.compiled: dict[tuple[Shape, torch.dtype], Callable[..., Any]] = {}
        self.cached_compile: dict[tuple[Shape, torch.dtype], dict[str, Any]] = {}
        self.liger: Callable[..., Any] | None = None
        if self.job.correctness_only:
            return
        if self.device.type != "cuda":
            self.report.notes.append("torch.compile baseline skipped on the CPU interpreter")
            return
        for k, (shape, dtype) in enumerate(self.timed):
            key = self._baseline_key(shape, dtype)
            if key in self.job.cached_baselines:
                self.cached_compile[(shape, dtype)] = self.job.cached_baselines[key]
                continue
            try:
                import torch._dynamo

                for limit in ("cache_size_limit", "recompile_limit"):
                    if hasattr(torch._dynamo.config, limit):
                        setattr(torch._dynamo.config, limit,
                                max(64, getattr(torch._dynamo.config, limit)))
                compiled = torch.compile(self.spec.stock, dynamic=False)
                inputs = self._baseline_inputs(k, shape, dtype)
                for _ in range(2):
                    compiled(*inputs)
                torch.cuda.synchronize()
                self.compiled[(shape, dtype)] = compiled
            except Exception as exc:
                self.report.notes.append(f"torch.compile baseline unavailable at "
                                         f"{self.spec.format_shape(shape)} {dtype_name(dtype)}: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        if self.spec.liger is not None and not self.job.quick:
            try:
                self.liger = self.spec.liger()
            except Exception as exc:  # a broken optional install costs the baseline, not more
                self.report.notes.append(f"liger-kernel baseline unavailable: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        elif self.spec.liger is not None:
            self.report.notes.append("liger-kernel baseline not timed on a quick sweep")
        self._phase("baselines")

    def _baseline_key(self, shape: Shape, dtype: torch.dtype) -> str:
        return baseline_key(self.job.kernel_type, list(shape), dtype_name(dtype),
                            self.report.device_name, torch.__version__, self.params)

    def _baseline_inputs(self, k: int, shape: Shape, dtype: torch.dtype) -> Inputs:
        return self._make(shape, dtype, generator(self.device, derive_seed(
            self.job.seed, "baseline", k, secrets.randbits(32))))

    # -- the timing step --------------------------------------------------------------------------

    def _run_timing(self) -> None:
        self.chooser = secrets.SystemRandom()
        self.order = random.Random(secrets.randbits(64))
        self.flush = make_flush_buffer(self.device)
        self.spinner = Spinner() if self.device.type == "cuda" else None
        self.incumbent_ready = self._incumbent_setup()
        try:
            for k, (shape, dtype) in enumerate(self.timed):
                self.report.timings.append(self._time_shape(
                    k, shape, dtype, self.job.timing_budget_s if k == 0
                    else self.job.timing_budget_s / 2))
        finally:
            for endpoint in (self.candidate, self.incumbent):
                if endpoint is not None and endpoint.pid:
                    endpoint.resume()
        if self.device.type != "cuda":
            self.report.notes.append("timings come from a host clock on the Triton interpreter "
                                     "and are not meaningful")
        self._phase("timing")

    def _incumbent_setup(self) -> bool:
        if self.incumbent is None:
            return False
        try:
            self.incumbent.receive("timing")
            return True
        except (Verdict, CandidateGone, channel.BadMessage) as exc:
            self._drop_incumbent(exc, "did not load")
            return False

    def _drop_incumbent(self, exc: BaseException, what: str) -> None:
        reason = exc.reason if isinstance(exc, Verdict) else f"{type(exc).__name__}: {exc}"
        self.report.notes.append(f"the incumbent {what} and was not timed: "
                                 f"{candidate_text(reason, NOTE_CHARS)}")
        self.incumbent_ready = False

    def _layout(self, shape: Shape, dtype: torch.dtype) -> tuple[Any, Any]:
        for prepared in self.prepared:
            if prepared.case.shape == shape and prepared.case.dtype == dtype:
                return prepared.out_shape, prepared.out_dtype
        raise RuntimeError(f"no case at the timed shape {shape} {dtype}")

    def _time_shape(self, k: int, shape: Shape, dtype: torch.dtype,
                    budget_s: float) -> TimedShape:
        where = f"timing [{self.spec.format_shape(shape)}] {dtype_name(dtype)}"
        self.where = where
        out_shape, out_dtype = self._layout(shape, dtype)
        shapes = list(zip(out_shape, out_dtype)) if isinstance(out_dtype, tuple) \
            else [(out_shape, out_dtype)]
        warm = self._make(shape, dtype, generator(self.device, derive_seed(
            self.job.seed, "warm", k)))
        candidate = Remote("candidate", self.candidate)
        remotes = [candidate]
        if self.incumbent_ready and self.incumbent is not None:
            remotes.append(Remote("incumbent", self.incumbent))
        for remote in list(remotes):
            try:
                self._warm_remote(k, remote, warm, where)
            except (Verdict, CandidateGone, channel.BadMessage) as exc:
                if remote.name == "candidate":
                    raise
                self._drop_incumbent(exc, f"failed at {where}")
                remotes.remove(remote)
        locals_ = self._local_contestants(shape, dtype, warm, where)
        input_bytes = sum(t.numel() * t.element_size() for t in tensors(warm))
        output_bytes = sum(math.prod(s) * torch.empty((), dtype=d).element_size()
                           for s, d in shapes)
        slots = max(1, min(MAX_CALLS_PER_BATCH,
                           BATCH_INPUT_BYTES // max(1, input_bytes + output_bytes)))
        for remote in remotes:
            self._open_slots(remote, warm, shapes, slots, where)
        self.per_call_us = self._overhead_us(output_bytes)
        self.audit = AuditPlan(self.chooser, self.device.type != "cuda",
                               AUDIT_SHARE_OF_BUDGET * budget_s)
        self.calls_made = 0
        try:
            return self._timed_rounds(k, shape, dtype, where, remotes, locals_, slots, budget_s)
        finally:
            for remote in remotes:
                self._close_slots(remote)

    def _warm_remote(self, k: int, remote: Remote, warm: Inputs, where: str) -> None:
        """One guarded call on the judge's inputs (compiles, and is judged like any call), the
        launch digest and peak memory at the primary shape, and the bare synced calls."""
        endpoint = remote.endpoint
        shared, buffers = self._shareable(warm)
        try:
            endpoint.ask("inputs", "timing", where, inputs=shared)
            layout = next(p.layout for p in self.prepared if p.case.shape == tuple(
                self.timed[k][0]) and p.case.dtype == self.timed[k][1])
            reply = endpoint.ask("call", "timing", where, outputs=layout)
            prepared = self._prepare(Case("timing", self.timed[k][0], self.timed[k][1],
                                          "warm-up"), 0, warm) if remote.name == "candidate" \
                else None
            if prepared is not None:
                self._check_reply(prepared, reply, f"{where} (warm-up)")
            del reply
            if k == 0:
                profile = endpoint.ask("profile", "timing", where, where=where)
                if prepared is not None:  # every call's output is checked, this one's too
                    self._check_reply(prepared, profile, f"{where} (profiled call)")
                digest = profile["digest"]
                digest = digest if isinstance(digest, str) and len(digest) <= 64 \
                    and digest.isalnum() else None
                peak = profile["peak_vram_mb"]
                if remote.name == "candidate":
                    self.report.launch_digest = digest
                    self.report.peak_vram_mb = None if peak is None else candidate_number(
                        peak, "peak memory", high=1e9)
                else:
                    self.report.incumbent_launch_digest = digest
            if self.device.type == "cuda":
                synced = endpoint.ask("synced", "timing", where)
                remote.synced = SyncedCalls(candidate_numbers(synced["wall_us"], "wall times"),
                                            candidate_numbers(synced["tail_us"], "tails"))
            endpoint.ask("release", "timing", where)
        except UntrustedValueError as exc:
            raise channel.BadMessage(str(exc)) from None
        finally:
            for buffer in buffers:
                buffer.free()

    def _check_reply(self, prepared: Any, reply: dict[str, Any], where: str) -> None:
        out = reply.get("out")
        out = tuple(out) if isinstance(out, list) else out
        self._check(prepared, clone_outputs(out) if isinstance(out, (torch.Tensor, tuple))
                    else _not_tensor(reply), where, stage="timing")

    def _local_contestants(self, shape: Shape, dtype: torch.dtype, warm: Inputs,
                           where: str) -> list[Local]:
        found: list[Local] = [Local("eager", self.spec.stock)]
        if (shape, dtype) in self.compiled:
            found.append(Local("compile", self.compiled[(shape, dtype)]))
        if self.liger is not None:
            found.append(Local("liger", self.liger))
        working = []
        for local in found:
            try:
                local.fn(*warm)
                if self.device.type == "cuda":
                    local.synced = synced_calls(local.fn, lambda: warm, self.device, self.flush)
                working.append(local)
            except Exception as exc:
                self.report.notes.append(f"{local.name} baseline failed at {where}: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        return working

    def _open_slots(self, remote: Remote, warm: Inputs, shapes: list[tuple[Any, Any]],
                    count: int, where: str) -> None:
        described = [[list(s), dtype_name(d)] for s, d in shapes]
        if self.device.type != "cuda":
            remote.endpoint.ask("slots", "timing", where, where=where, shapes=described)
            return
        shared_inputs, shared_outputs = [], []
        for _ in range(count):
            slot_inputs: list[Any] = []
            own_inputs: list[Any] = []
            for value in warm:
                if isinstance(value, torch.Tensor) and value.numel():
                    buffer, tensor = share_like(value)
                    remote.buffers.append(buffer)
                    slot_inputs.append(channel.Shared(buffer, tensor))
                    own_inputs.append(tensor)
                else:
                    slot_inputs.append(value)
                    own_inputs.append(value)
            outs, own_outs = [], []
            for s, d in shapes:
                empty = torch.empty(s, dtype=d, device=self.device)
                buffer, tensor = share_like(empty)
                remote.buffers.append(buffer)
                outs.append(channel.Shared(buffer, tensor))
                own_outs.append(tensor)
            shared_inputs.append(slot_inputs)
            shared_outputs.append(outs)
            remote.inputs.append(tuple(own_inputs))
            remote.outputs.append(own_outs)
        torch.cuda.synchronize()
        remote.endpoint.ask("slots", "timing", where, where=where, shapes=described,
                            inputs=shared_inputs, outputs=shared_outputs)

    def _close_slots(self, remote: Remote) -> None:
        try:
            remote.endpoint.resume()
            remote.endpoint.ask("end_slots", "timing", self.where)
        except (Verdict, CandidateGone, channel.BadMessage):
            pass
        for buffer in remote.buffers:
            buffer.free()
        remote.buffers, remote.inputs, remote.outputs = [], [], []

    def _overhead_us(self, output_bytes: int) -> float:
        """Device time per call besides the call itself in a remote batch (the flush, the copy
        into the slot), measured here on the same GPU, with a margin."""
        if self.device.type != "cuda" or self.flush is None:
            return 0.0
        scratch = torch.empty(max(1, output_bytes), dtype=torch.uint8, device=self.device)
        target = torch.empty_like(scratch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            start.record()
            self.flush.zero_()
            target.copy_(scratch)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return 1.25 * min(times) + 10.0

    # -- rounds -----------------------------------------------------------------------------------

    def _timed_rounds(self, k: int, shape: Shape, dtype: torch.dtype, where: str,
                      remotes: list[Remote], locals_: list[Local], slots: int,
                      budget_s: float) -> TimedShape:
        contestants: list[Remote | Local] = [*remotes, *locals_]
        samples: dict[str, list[float]] = {c.name: [] for c in contestants}
        began = _perf_counter()
        pilot = {c.name: self._batch(k, shape, dtype, where, c, 1) for c in contestants}
        round_s = _perf_counter() - began
        for name, times in pilot.items():
            if times is None:
                del samples[name]
        calls_per_round = calls_per_round_for([median(t) for t in pilot.values() if t])
        rounds = rounds_for(budget_s, round_s * calls_per_round, self.device, self.job.quick)
        per_batch = max(1, min(slots, MAX_CALLS_PER_BATCH) // calls_per_round)
        self.audit.expected = rounds * calls_per_round

        def run(count: int) -> None:
            for first in range(0, count, per_batch):
                here = min(per_batch, count - first)
                for contestant in self.order.sample(contestants, len(contestants)):
                    if contestant.name not in samples:
                        continue  # the incumbent, dropped
                    times = self._batch(k, shape, dtype, where, contestant,
                                        here * calls_per_round)
                    if times is None:
                        del samples[contestant.name]
                        continue
                    for r in range(here):
                        chunk = times[r * calls_per_round:(r + 1) * calls_per_round]
                        samples[contestant.name].append(sum(chunk) / len(chunk))

        run(rounds)
        retimed = False
        if "incumbent" in samples and self._too_noisy(samples):
            for name in samples:
                samples[name].clear()
            self.audit.expected += min(2 * rounds, MAX_ROUNDS) * calls_per_round
            run(min(2 * rounds, MAX_ROUNDS))
            retimed = True
        self._check_verified(remotes, where)
        return self._timed_shape(shape, dtype, samples, calls_per_round, retimed,
                                 [c for c in contestants if c.name in samples])

    def _too_noisy(self, samples: dict[str, list[float]]) -> bool:
        ratios = round_ratios(samples["incumbent"], samples["candidate"])
        speedup = paired_speedup([ratios])
        return speedup is not None and too_noisy(speedup, 1.0 + float(self.job.min_gain))

    def _batch(self, k: int, shape: Shape, dtype: torch.dtype, where: str,
               contestant: Remote | Local, calls: int) -> list[float] | None:
        """One batch of `contestant`'s calls; its device times (None: the incumbent failed and
        is dropped)."""
        for endpoint in (self.candidate, self.incumbent):
            if endpoint is not None and endpoint.pid and (
                    not isinstance(contestant, Remote) or endpoint is not contestant.endpoint):
                endpoint.pause()
        if isinstance(contestant, Local):
            return self._local_batch(k, shape, dtype, contestant, calls)
        contestant.endpoint.resume()
        try:
            return self._remote_batch(k, shape, dtype, where, contestant, calls)
        except (Verdict, CandidateGone, channel.BadMessage) as exc:
            if contestant.name == "candidate":
                raise
            self._drop_incumbent(exc, f"failed while timing at {where}")
            return None

    def _local_batch(self, k: int, shape: Shape, dtype: torch.dtype, local: Local,
                     calls: int) -> list[float]:
        gen = generator(self.device, derive_seed(self.job.seed, "baseline", k,
                                                 secrets.randbits(32)))
        args = [self._make(shape, dtype, gen) for _ in range(calls)]
        for attempt in range(BATCH_ATTEMPTS):
            times = run_batch(local.fn, args, self.flush, self.spinner, local.spin_us)
            local.spin_us = next_spin(local.spin_us, times.host_us, times.ahead, calls)
            if times.ahead:
                break
        return times.device_us

    def _remote_batch(self, k: int, shape: Shape, dtype: torch.dtype, where: str,
                      remote: Remote, calls: int) -> list[float]:
        endpoint = remote.endpoint
        contradictions = 0
        attempts = 0
        while True:
            seeds = [timed_call_seed(self.job.seed, k, self.calls_made + i) for i in range(calls)]
            self.calls_made += calls
            made = [self._make(shape, dtype, generator(self.device, seed)) for seed in seeds]
            if self.device.type == "cuda":
                for slot, inputs in zip(remote.inputs, made):
                    for into, value in zip(tensors(slot), tensors(inputs)):
                        into.copy_(value)
                torch.cuda.synchronize()
            else:
                endpoint.ask("stage", "timing", where, inputs=[list(x) for x in made])
            spin = remote.spin_us if self.device.type == "cuda" else 0.0
            # On the CPU the process's own CPU time bounds what it did (see check_batch_clock)
            clock = ProcessClock(endpoint.pid) if self.device.type != "cuda" and endpoint.pid \
                else None
            cpu_before = clock.read() if clock else None
            began = _perf_counter()
            reply = endpoint.ask("batch", "timing", where, calls=list(range(calls)),
                                 spin_us=spin)
            wall_us = (_perf_counter() - began) * 1e6
            cpu_after = clock.read() if clock else None
            cpu_us = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None \
                else None
            if self.device.type == "cuda":
                endpoint.pause()  # no work of its own between its reply and the slots' copies
            try:
                device_us = candidate_numbers(reply["device_us"], "device times", calls, 1e9)
                host_us = candidate_number(reply["host_us"], "host time", high=1e9)
            except UntrustedValueError as exc:
                raise channel.BadMessage(str(exc)) from None
            ahead = reply["ahead"] is True
            outputs = self._batch_outputs(remote, calls, where)
            if remote.name == "candidate":
                self._check_inputs_kept(remote, made, where)
                self._audit_batch(shape, dtype, where, seeds, made, outputs)
            remote.batches += 1
            problem = check_batch_clock(wall_us, device_us, spin, calls * self.per_call_us,
                                        cpu_us)
            if problem is not None and ahead:
                contradictions += 1
                if contradictions > WALL_RETRIES:
                    raise Verdict("FAIL", "timing", f"the judge's clock contradicts the device "
                                  f"time the {remote.name} process reported at {where}: "
                                  f"{problem} ({count_of(contradictions, 'contradiction')} in "
                                  "a row)",
                                  "timing-contradiction")
                continue
            if not ahead and self.device.type == "cuda":
                attempts += 1
                remote.spin_us = next_spin(remote.spin_us, host_us, False, calls)
                if attempts < BATCH_ATTEMPTS:
                    continue
                remote.unverified += 1
            else:
                remote.spin_us = next_spin(remote.spin_us, host_us, True, calls)
            return device_us

    def _batch_outputs(self, remote: Remote, calls: int, where: str) -> list[Any]:
        """This batch's outputs in the judge's memory (GPU: the slots; CPU: received bytes)."""
        if self.device.type == "cuda":
            return [tuple(o) if len(o) > 1 else o[0] for o in remote.outputs[:calls]]
        outs = remote.endpoint.ask("batch_outputs", "timing", where)["outputs"]
        if not isinstance(outs, list) or len(outs) != calls:
            raise channel.BadMessage("a batch's outputs do not match its calls")
        return [tuple(o) if isinstance(o, list) else o for o in outs]

    def _timed_shape(self, shape: Shape, dtype: torch.dtype, samples: dict[str, list[float]],
                     calls_per_round: int, retimed: bool,
                     contestants: list[Remote | Local]) -> TimedShape:
        candidate = samples["candidate"]
        synced = {c.name: c.synced for c in contestants if c.synced is not None}
        if "eager" in synced and "candidate" in synced:
            reason = hidden_work_reason(synced["candidate"], synced["eager"], median(candidate))
            if reason is not None:
                raise Verdict("REJECTED", "timing", f"{reason} ({self.where})", "side-stream")

        def launch(name: str) -> float | None:
            if name not in synced or name not in samples:
                return None
            return synced[name].launch_us(median(samples[name]))

        result = TimedShape(shape=list(shape), dtype=dtype_name(dtype),
                            latency_us=median(candidate), iqr_us=iqr(candidate),
                            samples=len(candidate), launch_us=launch("candidate"),
                            eager_launch_us=launch("eager"), compile_launch_us=launch("compile"),
                            incumbent_launch_us=launch("incumbent"), retimed=retimed,
                            calls_per_round=calls_per_round,
                            host_bound_batches=sum(c.unverified for c in contestants
                                                   if isinstance(c, Remote)))
        if "incumbent" in samples:
            incumbent = samples["incumbent"]
            result.incumbent_us, result.incumbent_iqr_us = median(incumbent), iqr(incumbent)
            result.candidate_rounds_us = [round(v, 4) for v in candidate]
            result.incumbent_rounds_us = [round(v, 4) for v in incumbent]
        if "eager" in samples:
            result.eager_us, result.eager_iqr_us = median(samples["eager"]), iqr(samples["eager"])
        if "liger" in samples:
            result.liger_us = median(samples["liger"])
        if "compile" in samples:
            result.compile_us, result.compile_iqr_us = (median(samples["compile"]),
                                                        iqr(samples["compile"]))
            self.report.new_baselines[self._baseline_key(shape, dtype)] = {
                "compile_us": result.compile_us, "compile_iqr_us": result.compile_iqr_us,
                "eager_us": result.eager_us, "samples": result.samples,
                "compile_launch_us": result.compile_launch_us,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        elif (shape, dtype) in self.cached_compile:
            cached = self.cached_compile[(shape, dtype)]
            result.compile_us = cached.get("compile_us")
            result.compile_iqr_us = cached.get("compile_iqr_us")
            result.compile_launch_us = cached.get("compile_launch_us")
            result.compile_cached = True
        return result


def _not_tensor(reply: dict[str, Any]) -> Any:
    from autokernel.harness.judge import _NotATensor

    return _NotATensor(candidate_text(reply.get("type", "something else"), 200),
                       reply.get("subclass") is True)
