"""The candidate process's timing half: candidate, incumbent, eager and compiled stock timed in the
same rounds at every timed shape, each timed output's digest kept for the judge's audit.

`CandidateTiming` is a part of `autokernel.harness.candidate.Candidate` (its base class): it uses
the state the candidate process set up (the job, the loaded kernels, the guards, the report) and
the guarded-call helpers defined there. Split out so each half reads in one sitting.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from autokernel.harness.cases import case_seed
from autokernel.harness.compare import bits
from autokernel.harness.guards import launch_digest, live_threads, new_threads
from autokernel.harness.inputs import TIMED_CALL_STRIDE, generator, tensors
from autokernel.harness.outputs import outputs_digest, tuple_problem
from autokernel.harness.paired import paired_speedup, round_ratios, too_noisy
from autokernel.harness.protocol import TimedShape
from autokernel.harness.timing import (
    MAX_ROUNDS, DeviceTimer, Samples, Spinner, SyncedCalls, TimedRounds, hidden_work_reason, iqr,
    make_flush_buffer, median, rounds_for, synced_calls,
)
from autokernel.harness.verdict import NO_LAUNCH, Verdict, exception_detail, exception_summary
from autokernel.ops.spec import Inputs, Shape, dtype_name

INCUMBENT_MODULE = "incumbent_kernel"


class IncumbentFailed(Exception):
    """The incumbent raised while timed: the paired comparison is lost, not the verdict."""


def _out_nbytes(value: Any) -> int | list[int]:
    """One timed shape's output sizes: an int, or a list for a type with several outputs."""
    return [int(v) for v in value] if isinstance(value, list) else int(value)


class CandidateTiming:
    """The `time` request and its helpers; the attributes they read (job, device, timed, report,
    the loaded kernel, the spinner) are set by `Candidate`'s setup."""

    def _time(self, message: dict[str, Any]) -> dict[str, Any]:
        """Every timed shape; returns, per shape, each timed candidate call's input index and
        output digest (the judge audits some of them afterwards)."""
        self._load_incumbent()
        self._record_launches()
        flush = make_flush_buffer(self.device)
        self.spinner = Spinner()
        pools = []
        budget = float(self.job["timing_budget_s"])
        for k, (shape, dtype) in enumerate(self.timed):
            pool: list[tuple[int, torch.Tensor]] = []
            self.report.timings.append(self._time_shape(
                k, shape, dtype, flush, budget if k == 0 else budget / 2,
                _out_nbytes(message["out_nbytes"][k]), pool))
            digests = torch.stack([d for _, d in pool]).tolist() if pool else []
            pools.append([[index, digest] for (index, _), digest in zip(pool, digests)])
        if self.device.type != "cuda":
            self.report.notes.append("timings come from a host clock on the Triton interpreter "
                                     "and are not meaningful")
        self._phase("timing")
        return {"pools": pools}

    def _load_incumbent(self) -> None:
        """The current best kernel, timed in the same rounds as the candidate (paired A/B).

        It passed the harness before; if it no longer loads, the comparison is lost, not the
        verdict."""
        path = self.job["incumbent_path"]
        if path is None:
            return
        threads = live_threads()
        try:
            module_spec = importlib.util.spec_from_file_location(INCUMBENT_MODULE, path)
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[INCUMBENT_MODULE] = module
            module_spec.loader.exec_module(module)
            kernel_fn = getattr(module, "kernel_fn")
        except BaseException as exc:
            self.report.notes.append(f"the incumbent did not load and was not timed: "
                                     f"{type(exc).__name__}: {str(exc)[:300]}")
            return
        self._check_integrity("timing", threads, "while importing the incumbent")
        self.incumbent_fn = kernel_fn

    def _record_launches(self) -> None:
        """Digests of what the candidate and the incumbent launch in one call at the primary
        timed shape (same inputs), so that a change that launches exactly what the best kernel
        launches can be named as such."""
        shape, dtype = self.timed[0]
        inputs = self._make(shape, dtype, self._sequential(0))
        for name, fn in (("candidate", self.kernel_fn), ("incumbent", self.incumbent_fn)):
            if fn is None:
                continue
            self.monitor.signatures = []
            try:
                self._timed_wrapper(fn, f"launch record [{self.spec.format_shape(shape)}]",
                                    checked=name == "candidate")(*inputs)
                self._sync()
                digest: str | None = launch_digest(self.monitor.signatures)
            except IncumbentFailed:
                digest = None
            finally:
                self.monitor.signatures = None
            if name == "candidate":
                self.report.launch_digest = digest
            else:
                self.report.incumbent_launch_digest = digest
        del inputs

    def _timed_wrapper(self, kernel_fn: Callable[..., Any], where: str,
                       checked: bool) -> Callable[..., Any]:
        """kernel_fn with the guards every timed call gets: launch monitor armed, op recorder on
        (allocations unpoisoned: a fill would add device time), and, when `checked`, the
        host-only checks after each call (a launch happened, no compute op, no thread left
        running, a plain tensor returned). Input mutation and output digests are taken after
        the batch, outside the timed region."""
        monitor, recorder, kernel_path = self.monitor, self.recorder, self.kernel_path
        outputs = self.spec.outputs

        def call(*args: Any) -> Any:
            threads = live_threads() if checked else set()
            launches = monitor.launches
            recorder.reset()
            recorder.poison_allocations = False
            monitor.armed = True
            try:
                with recorder:
                    out = kernel_fn(*args)
            except BaseException as exc:
                if not checked:
                    raise IncumbentFailed(f"{type(exc).__name__}: {str(exc)[:300]}") from None
                monitor.armed = False
                self._refuse_violations("timing", where)
                raise Verdict("CRASH", "timing", f"{where}: "
                              + exception_summary(exc, kernel_path),
                              detail=exception_detail(exc, kernel_path)) from None
            finally:
                monitor.armed = False
                recorder.poison_allocations = True
            if not checked:
                return out
            self._refuse_violations("timing", where)
            if monitor.launches == launches:
                raise Verdict("REJECTED", "timing", f"library fallback at {where}: a timed call "
                              f"{NO_LAUNCH.removeprefix('kernel_fn ')}", "library-fallback")
            started = new_threads(threads)
            if started:
                raise Verdict("REJECTED", "timing", f"background thread at {where}: still "
                              f"running after a timed call returned: {', '.join(started[:3])}",
                              "thread")
            if outputs > 1:
                problem = tuple_problem(out, outputs)
                if problem is not None and problem[1]:
                    raise Verdict("REJECTED", "timing", f"lazy output at {where}: returned "
                                  f"{problem[0]}", "tensor-subclass")
                if problem is not None:
                    raise Verdict("FAIL", "timing", f"{where}: returned {problem[0]}, not a "
                                  f"tuple of {outputs} tensors")
                return out
            if type(out) is not torch.Tensor:  # noqa: E721
                if isinstance(out, torch.Tensor):
                    raise Verdict("REJECTED", "timing", f"lazy output at {where}: returned "
                                  f"{type(out).__qualname__}", "tensor-subclass")
                raise Verdict("FAIL", "timing", f"{where}: returned {type(out).__qualname__}, "
                              "not a tensor")
            return out

        return call

    def _incumbent_contestant(self, inputs: Inputs, where: str) -> Callable[..., Any] | None:
        if self.incumbent_fn is None:
            return None
        incumbent = self._timed_wrapper(self.incumbent_fn, where, checked=False)
        try:
            incumbent(*inputs)
            self._sync()
        except BaseException as exc:  # the paired comparison is lost, not the verdict
            reason = exc.reason if isinstance(exc, Verdict) else f"{type(exc).__name__}: {exc}"
            self.report.notes.append(f"the incumbent failed at {where} and was not timed: "
                                     f"{reason[:300]}")
            return None
        return incumbent

    def _time_shape(self, k: int, shape: Shape, dtype: torch.dtype, flush: torch.Tensor | None,
                    budget_s: float, out_nbytes: int | list[int],
                    pool: list[tuple[int, torch.Tensor]]) -> TimedShape:
        assert self.kernel_fn is not None
        spec = self.spec
        where = f"timing [{spec.format_shape(shape)}] {dtype_name(dtype)}"
        sequential = self._sequential(10 + k)
        calls = itertools.count()
        warm = self._make(shape, dtype, sequential)
        out = self._guarded_call(warm, out_nbytes, "timing", where)  # warm-up, all detectors
        del out
        input_bytes = sum(t.numel() * t.element_size() for t in tensors(warm))

        if self.device.type == "cuda" and k == 0:
            # Peak memory of a bare call at the primary shape: what the kernel itself allocates
            # beyond its inputs (output included), none of the detectors' copies.
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
            allocated = torch.cuda.memory_allocated(self.device)
            out = self.kernel_fn(*warm)
            torch.cuda.synchronize()
            self.report.peak_vram_mb = round((torch.cuda.max_memory_allocated(self.device)
                                              - allocated) / 2**20, 3)
            del out
        contestants: list[tuple[str, Callable[..., Any]]] = [
            ("candidate", self._timed_wrapper(self.kernel_fn, where, checked=True))]
        incumbent = self._incumbent_contestant(warm, where)
        if incumbent is not None:
            contestants.append(("incumbent", incumbent))
        baselines = [("eager", spec.stock)]
        if (shape, dtype) in self.compiled:
            baselines.append(("compile", self.compiled[(shape, dtype)]))
        if self.liger is not None:
            baselines.append(("liger", self.liger))
        for name, fn in baselines:
            try:
                fn(*warm)
                contestants.append((name, fn))
            except Exception as exc:
                self.report.notes.append(f"{name} baseline failed at {where}: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        warm = ()  # not needed past here; large inputs should not stay alive while timing

        def prepare(r: int, name: str) -> tuple[Inputs, Any]:
            if name != "candidate":
                return self._make(shape, dtype, sequential), None
            index = next(calls)
            seed = case_seed(self.timing_seed, TIMED_CALL_STRIDE * k + index)
            inputs = self._make(shape, dtype, generator(self.device, seed))
            return inputs, (inputs, [bits(t).clone() for t in tensors(inputs)], index)

        def after(r: int, name: str, out: Any, token: Any) -> None:
            if name != "candidate":
                return
            inputs, before, index = token
            if not all(torch.equal(bits(t), saved) for t, saved in zip(tensors(inputs), before)):
                raise Verdict("REJECTED", "timing", f"input mutation at {where}: a timed call "
                              "modified its inputs", "input-mutation")
            pool.append((index, outputs_digest(out)))

        def measure(entrants: list[tuple[str, Callable[..., Any]]]) -> tuple[TimedRounds, bool]:
            timer = DeviceTimer(entrants, prepare, after, self.device, flush, 2 * input_bytes,
                                self.spinner)
            rounds = rounds_for(budget_s, timer.pilot(), self.device, self.job["quick"])
            timed = timer.run(rounds)
            if not any(name == "incumbent" for name, _ in entrants) \
                    or not self._too_noisy(timed.samples):
                return timed, False
            return timer.run(min(2 * rounds, MAX_ROUNDS)), True

        try:
            timed, retimed = measure(contestants)
        except IncumbentFailed as exc:
            self.report.notes.append(f"the incumbent failed while timing at {where} and was "
                                     f"dropped: {exc}")
            contestants = [c for c in contestants if c[0] != "incumbent"]
            incumbent = None
            timed, retimed = measure(contestants)
        threads = live_threads()  # the baselines may start their own; the candidate's are checked
        samples = timed.samples
        candidate = samples["candidate"]
        synced = self._synced_calls(contestants, shape, dtype, sequential, flush)
        self._check_integrity("timing", threads, f"during {where}")
        if "eager" in synced:
            reason = hidden_work_reason(synced["candidate"], synced["eager"], candidate.median_us)
            if reason is not None:
                raise Verdict("REJECTED", "timing", f"{reason} ({where})", "side-stream")
        for name in timed.synchronizing:
            self.report.notes.append(
                f"{where}: {name} waits for the device inside its call (a host sync such as "
                ".item()); it was timed alone, and its device time includes that wait")
        if timed.host_bound_batches:
            self.report.notes.append(
                f"{where}: the host fell behind the GPU in {timed.host_bound_batches} batch(es) "
                "even after retries; their device times may include host launch time")
        return self._timed_shape(shape, dtype, timed, retimed, synced)

    def _timed_shape(self, shape: Shape, dtype: torch.dtype, timed: TimedRounds, retimed: bool,
                     synced: dict[str, SyncedCalls]) -> TimedShape:
        samples = timed.samples
        candidate = samples["candidate"]

        def launch(name: str) -> float | None:
            if name not in synced or name not in samples:
                return None
            return synced[name].launch_us(samples[name].median_us)

        result = TimedShape(shape=list(shape), dtype=dtype_name(dtype),
                            latency_us=candidate.median_us, iqr_us=candidate.iqr_us,
                            samples=len(candidate.latency_us), launch_us=launch("candidate"),
                            eager_launch_us=launch("eager"), compile_launch_us=launch("compile"),
                            incumbent_launch_us=launch("incumbent"), retimed=retimed,
                            calls_per_round=timed.calls_per_round,
                            retried_batches=timed.retried_batches,
                            host_bound_batches=timed.host_bound_batches)
        if "incumbent" in samples:
            result.incumbent_us, result.incumbent_iqr_us = _stats(samples["incumbent"])
            result.candidate_rounds_us = [round(v, 4) for v in candidate.latency_us]
            result.incumbent_rounds_us = [round(v, 4) for v in samples["incumbent"].latency_us]
        if "eager" in samples:
            result.eager_us, result.eager_iqr_us = _stats(samples["eager"])
        if "liger" in samples:
            result.liger_us = samples["liger"].median_us
        if "compile" in samples:
            result.compile_us, result.compile_iqr_us = _stats(samples["compile"])
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

    def _too_noisy(self, samples: dict[str, Samples]) -> bool:
        ratios = round_ratios(samples["incumbent"].latency_us, samples["candidate"].latency_us)
        speedup = paired_speedup([ratios])
        return speedup is not None and too_noisy(speedup, 1.0 + float(self.job["min_gain"]))

    def _synced_calls(self, contestants: list[tuple[str, Callable[..., Any]]], shape: Shape,
                      dtype: torch.dtype, gen: torch.Generator,
                      flush: torch.Tensor | None) -> dict[str, SyncedCalls]:
        """Host launch cost and hidden-work tails, from bare synchronous calls: the monitor and
        recorder off for every contestant alike, so the host figure is what a model would pay."""
        bare = {"candidate": self.kernel_fn, "incumbent": self.incumbent_fn}
        return {name: synced_calls(bare.get(name) or fn,
                                   lambda: self._make(shape, dtype, gen), self.device, flush)
                for name, fn in contestants}


def _stats(samples: Samples) -> tuple[float, float]:
    return median(samples.latency_us), iqr(samples.latency_us)

