"""The candidate process: the only process that imports a candidate `kernel.py`.

It is the worker's child (`autokernel.harness.worker`), and the judge, its parent, drives it over
a socket (`channel`). It holds no reference answer, tolerance, case list, correctness seed or
audit choice: it is handed one set of inputs at a time, calls the kernel with every detector
armed, and hands the output back for the judge to compare. What it does:

1. `setup`: CUDA, the stock baselines (torch.compile warmed, Liger), poison in the allocator's
   free memory, the launch monitor and op recorder, then the OS sandbox (irreversible), then the
   candidate's import, checked for tampering.
2. `inputs`, `refill`, `call`: one guarded call of kernel_fn (allocator poisoned, inputs
   checksummed, aten ops recorded, Triton launches counted and their stream checked, threads
   compared, identities re-verified), or its ghost replay with every Triton launch skipped.
3. `time`: candidate, incumbent, eager and compiled stock timed in the same rounds (`timing`),
   with the same host-side guards in every timed call. Every timed output's digest is kept; the
   judge picks which to audit only afterwards, and re-runs those inputs as guarded calls.

A rule broken on this side is a verdict sent back; the judge ends the run with it.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from autokernel.harness import channel
from autokernel.harness.cases import case_seed
from autokernel.harness.compare import bits, bitwise_equal
from autokernel.harness.guards import (
    FallbackRecorder, IdentitySnapshot, LaunchMonitor, harness_namespaces, launch_digest,
    live_threads, new_threads, poison_allocator, poison_free_cache,
)
from autokernel.harness.inputs import (
    TIMED_CALL_STRIDE, generator, make_inputs, output_digest, tensors,
)
from autokernel.harness.paired import paired_speedup, round_ratios, too_noisy
from autokernel.harness.probe import self_test
from autokernel.harness.protocol import TimedShape, WorkerReport, baseline_key
from autokernel.harness.timing import (
    MAX_ROUNDS, DeviceTimer, Samples, Spinner, SyncedCalls, TimedRounds, hidden_work_reason, iqr,
    make_flush_buffer, median, rounds_for, synced_calls,
)
from autokernel.harness.verdict import (
    NO_LAUNCH, WHERE, Verdict, exception_detail, exception_summary,
)
from autokernel.ops import get_spec
from autokernel.ops.spec import Inputs, Shape, dtype_name, parse_dtype

CANDIDATE_MODULE = "candidate_kernel"
INCUMBENT_MODULE = "incumbent_kernel"
# Seeds of the timing inputs nobody audits (baseline calls, launch record, host-cost calls), far
# from the per-call range TIMED_CALL_STRIDE * shape + call.
SEQUENTIAL_SEEDS = 900_000_000

_perf_counter = time.perf_counter


class IncumbentFailed(Exception):
    """The incumbent raised while timed: the paired comparison is lost, not the verdict."""


class Candidate:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.report = WorkerReport(status="PASS")
        self.device = torch.device("cpu")
        self.kernel_fn: Callable[..., Any] | None = None
        self.incumbent_fn: Callable[..., Any] | None = None
        self.inputs: Inputs = ()
        self.held: list[torch.Tensor] = []
        self.kept: tuple[str, torch.Tensor, torch.Tensor] | None = None
        self.phase_started = _perf_counter()

    def serve(self) -> None:
        handlers = {"setup": self._setup, "inputs": self._take_inputs, "refill": self._refill,
                    "call": self._call, "release": self._release, "check_kept": self._check_kept,
                    "time": self._time, "report": self._report}
        while True:
            try:
                message = channel.receive(self.sock, self.device)
            except channel.ChannelClosed:
                return
            op = message.get("op")
            if op == "exit":
                return
            try:
                reply = handlers[op](message)
            except Verdict as verdict:
                reply = {"verdict": verdict.to_dict()}
            except torch.OutOfMemoryError as exc:
                reply = {"oom": str(exc).strip().splitlines()[0][:300] if str(exc) else "OOM"}
            except Exception:  # a bug on this side, or one a candidate provoked: not a pass
                reply = {"harness_error": traceback.format_exc(limit=-3).strip()[-1500:]}
            channel.send(self.sock, reply)
            if self.device.type == "cuda":
                torch.cuda.ipc_collect()  # outputs the judge has let go of

    def _phase(self, name: str) -> None:
        now = _perf_counter()
        self.report.phase_seconds[name] = round(now - self.phase_started, 3)
        self.phase_started = now

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _report(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"report": self.report.to_dict()}

    # -- setup: everything trusted, then the sandbox, then the candidate --------------------------

    def _setup(self, job: dict[str, Any]) -> dict[str, Any]:
        self.job = job
        self.phase_started = _perf_counter()
        self.device = torch.device("cuda", 0) if job["device"] == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:
            # The interpreter runs one program at a time; intra-op threads only add spin-waits
            # (measured: 20 ms per tiny op on a busy 2-core machine, 2 us with one thread).
            torch.set_num_threads(1)
        self.spec = get_spec(job["kernel_type"])
        self.params = dict(job["params"])
        self.timing_seed = int(job["timing_seed"])
        self.kernel_path = job["kernel_path"]
        self.gpu_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" \
            else "cpu"
        self.timed = [(tuple(shape), parse_dtype(dtype)) for shape in job["timing_shapes"]
                      for dtype in job["timing_dtypes"]]
        self._prepare_baselines()
        self._load_candidate()
        return {"ok": True}

    def _make(self, shape: Shape, dtype: torch.dtype, gen: torch.Generator) -> Inputs:
        return make_inputs(self.spec, shape, dtype, self.device, gen, self.params)

    def _sequential(self, offset: int) -> torch.Generator:
        return generator(self.device, case_seed(self.timing_seed, SEQUENTIAL_SEEDS + offset))

    def _prepare_baselines(self) -> None:
        job = self.job
        self.compiled: dict[tuple[Shape, torch.dtype], Callable[..., Any]] = {}
        self.cached_compile: dict[tuple[Shape, torch.dtype], dict[str, Any]] = {}
        if self.device.type == "cuda" and not job.get("correctness_only"):
            for k, (shape, dtype) in enumerate(self.timed):
                key = self._baseline_key(shape, dtype)
                if key in job["cached_baselines"]:
                    self.cached_compile[(shape, dtype)] = job["cached_baselines"][key]
                    continue
                compiled = self._compile_stock(k, shape, dtype)
                if compiled is not None:
                    self.compiled[(shape, dtype)] = compiled
        elif self.device.type != "cuda":
            self.report.notes.append("torch.compile baseline skipped on the CPU interpreter")
        self.liger = None  # imported now, before the candidate exists, like the other baselines
        # Not for a quick sweep (the loop's screen): importing Liger costs seconds per worker,
        # and every keep's full sweep times it.
        if (self.spec.liger is not None and self.device.type == "cuda" and not job["quick"]
                and not job.get("correctness_only")):
            try:
                self.liger = self.spec.liger()
            except Exception as exc:  # a broken optional install costs the baseline, not more
                self.report.notes.append(f"liger-kernel baseline unavailable: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        elif (self.spec.liger is not None and self.device.type == "cuda"
              and not job.get("correctness_only")):
            self.report.notes.append("liger-kernel baseline not timed on a quick sweep")
        self._sync()
        poisoned = poison_free_cache(self.device)
        if poisoned:
            self.report.notes.append(f"poisoned {poisoned / 2**20:.0f} MiB of free cached memory")
        self._phase("baselines")

    def _baseline_key(self, shape: Shape, dtype: torch.dtype) -> str:
        return baseline_key(self.job["kernel_type"], list(shape), dtype_name(dtype),
                            self.gpu_name, torch.__version__, self.params)

    def _compile_stock(self, k: int, shape: Shape, dtype: torch.dtype) -> Callable[..., Any] | None:
        """torch.compile of the stock path (dynamic=False), compiled once and warmed."""
        try:
            import torch._dynamo

            for limit in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, limit):
                    setattr(torch._dynamo.config, limit, max(64, getattr(torch._dynamo.config,
                                                                         limit)))
            compiled = torch.compile(self.spec.stock, dynamic=False)
            inputs = self._make(shape, dtype, self._sequential(100 + k))
            for _ in range(2):
                compiled(*inputs)
            torch.cuda.synchronize()
            return compiled
        except Exception as exc:
            self.report.notes.append(f"torch.compile baseline unavailable at "
                                     f"{self.spec.format_shape(shape)} {dtype_name(dtype)}: "
                                     f"{type(exc).__name__}: {str(exc)[:200]}")
            return None

    def _load_candidate(self) -> None:
        self.monitor = LaunchMonitor(self.job["device"])
        self.monitor.install()
        self.recorder = FallbackRecorder(self.monitor, self.device)
        self_test(self.monitor, self.recorder, self.device)
        self._confine()
        self.snapshot = IdentitySnapshot.take(harness_namespaces(self.job["kernel_type"]))
        threads = live_threads()
        path = self.kernel_path
        module_spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
        if module_spec is None or module_spec.loader is None:
            raise Verdict("CRASH", "import", f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[CANDIDATE_MODULE] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException as exc:
            raise Verdict("CRASH", "import", "importing kernel.py raised "
                          + exception_summary(exc, path),
                          detail=exception_detail(exc, path)) from None
        self._check_integrity("import", threads, "while importing kernel.py")
        kernel_fn = getattr(module, "kernel_fn", None)
        if not callable(kernel_fn):
            raise Verdict("CRASH", "import", "kernel.py defines no callable kernel_fn")
        self.kernel_fn = kernel_fn
        self._phase("import")

    def _confine(self) -> None:
        """The OS sandbox, last thing before the candidate is imported (it is irreversible: no
        exec but the compiler toolchain, no writes outside the work directory, the Triton cache
        and, on a GPU, /dev/shm, where CUDA IPC keeps its counters; no network, no setsid).
        What could not be applied is said in the report."""
        from autokernel.harness import sandbox

        device = self.job["device"]
        sandbox.warm_triton_driver(device)
        cache = os.environ.get("TRITON_CACHE_DIR")
        writable = [Path(cache)] if cache else []
        if device == "cuda" and Path("/dev/shm").is_dir():
            writable.append(Path("/dev/shm"))
        state = sandbox.apply_candidate_sandbox(
            Path.cwd(), writable=writable, executables=sandbox.toolchain_executables(device),
            device=device)
        self.report.sandbox = state.to_dict()
        if device == "cuda":
            blocked = sandbox.toolchain_probe(Path.cwd())
            if blocked is not None:
                raise Verdict("CRASH", "harness", "the sandbox stops the C compiler Triton builds "
                              f"every kernel's launcher with ({blocked}); name the programs it "
                              f"runs in {sandbox.EXTRA_EXEC_ENV} (':'-separated), see `autokernel "
                              "doctor`")
        if state.missing:
            self.report.notes.append("sandbox incomplete: " + "; ".join(
                f"{name} not applied ({why})" for name, why in state.missing.items()))

    def _check_integrity(self, stage: str, threads_before: set[int], where: str) -> None:
        tampered = self.snapshot.changes() + [f"{h} hook removed"
                                              for h in self.monitor.tampered()]
        kept_state = [t for t in tampered if t.endswith("[call-time-state]")]
        if kept_state:
            raise Verdict("REJECTED", stage, f"state kept across calls {where}: "
                          f"{', '.join(kept_state[:5])}", "call-time-state")
        if tampered:
            raise Verdict("REJECTED", stage, f"tampering {where}: {', '.join(tampered[:5])}",
                          "tampering")
        if self.monitor.stream_violations:
            raise Verdict("REJECTED", stage, f"side stream {where}: "
                          f"{self.monitor.stream_violations[0]}", "side-stream")
        started = new_threads(threads_before)
        if started:
            raise Verdict("REJECTED", stage, f"background thread {where}: still running after "
                          f"the call returned: {', '.join(started[:3])}", "thread")

    # -- guarded calls on the judge's inputs ------------------------------------------------------

    def _take_inputs(self, message: dict[str, Any]) -> dict[str, Any]:
        self.inputs = tuple(message["inputs"])
        return {"ok": True}

    def _refill(self, message: dict[str, Any]) -> dict[str, Any]:
        """New values into the held input tensors: the same objects, so a pointer- or
        identity-keyed cache would replay."""
        for buffer, value in zip(tensors(self.inputs), tensors(tuple(message["values"]))):
            buffer.copy_(value)
        self._sync()
        return {"ok": True}

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        out_nbytes = int(message["out_nbytes"])
        if message.get("ghost"):
            out = self._ghost_call(out_nbytes)
        else:
            out = self._guarded_call(self.inputs, out_nbytes, "", WHERE)
        if message.get("hold"):  # alive until "release": a reused buffer shows as one pointer
            self.held.append(out)
        if message.get("keep"):  # held, with a copy, until "check_kept"
            self.kept = (WHERE, out, out.clone())
        if type(out) is not torch.Tensor:  # noqa: E721 - the judge says why that is wrong
            return {"out": None, "type": f"{type(out).__module__}.{type(out).__qualname__}",
                    "subclass": isinstance(out, torch.Tensor)}
        return {"out": out, "storage": out.untyped_storage().data_ptr()}

    def _release(self, _: dict[str, Any]) -> dict[str, Any]:
        self.held.clear()
        self.inputs = ()
        return {"ok": True}

    def _check_kept(self, _: dict[str, Any]) -> dict[str, Any]:
        """An output belongs to its caller: one held through every later call must not have
        changed (a kernel handing out a pool of buffers overwrites it)."""
        if self.kept is not None:
            where, out, copy = self.kept
            self.kept = None
            if not bitwise_equal(out, copy):
                raise Verdict("FAIL", "edge_sizes", f"an earlier output changed after later "
                              f"calls (the {where} output, held by the harness): kernel_fn "
                              "reuses output buffers it has already returned")
        return {"ok": True}

    def _guarded_call(self, inputs: Inputs, out_nbytes: int, stage: str, where: str) -> Any:
        """One call of kernel_fn with every detector armed; returns its output unchecked."""
        assert self.kernel_fn is not None
        poison_allocator(out_nbytes, self.device)
        saved = [bits(t).clone() for t in tensors(inputs)]
        threads = live_threads()
        launches = self.monitor.launches
        self.recorder.reset()
        self.monitor.armed = True
        try:
            with self.recorder:
                out = self.kernel_fn(*inputs)
            self._sync()
        except BaseException as exc:
            self.monitor.armed = False
            # A cheat caught on the way to the exception is the better explanation.
            self._check_integrity(stage, threads, f"at {where}")
            self._refuse_violations(stage, where)
            raise Verdict("CRASH", stage, f"{where}: "
                          + exception_summary(exc, self.kernel_path),
                          detail=exception_detail(exc, self.kernel_path)) from None
        finally:
            self.monitor.armed = False
        self._check_integrity(stage, threads, f"at {where}")
        self._refuse_violations(stage, where)
        if self.monitor.launches == launches:
            raise Verdict("REJECTED", stage, f"library fallback at {where}: {NO_LAUNCH}",
                          "library-fallback")
        for position, (tensor, before) in enumerate(zip(tensors(inputs), saved)):
            if not torch.equal(bits(tensor), before):
                raise Verdict("REJECTED", stage, f"input mutation at {where}: kernel_fn "
                              f"modified its tensor argument #{position}", "input-mutation")
        return out

    def _refuse_violations(self, stage: str, where: str) -> None:
        """What the recorder refused during the call (compute ops, host reads, launch hooks) is
        the verdict, also when the call then raised."""
        if self.recorder.violations:
            ops = sorted(set(self.recorder.violations))
            raise Verdict("REJECTED", stage, f"library fallback at {where}: kernel_fn ran "
                          f"{', '.join(ops[:6])} instead of its own Triton kernel (only "
                          "allocation, view and copy ops are allowed)", "library-fallback")

    def _ghost_call(self, out_nbytes: int) -> Any:
        """The held inputs again with every Triton launch skipped (the judge checks that the
        output is then wrong)."""
        assert self.kernel_fn is not None
        poison_allocator(out_nbytes, self.device)
        threads = live_threads()
        self.recorder.reset()
        self.monitor.ghost = self.monitor.armed = True
        try:
            with self.recorder:
                out = self.kernel_fn(*self.inputs)
            self._sync()
        except Exception as exc:
            self.monitor.ghost = self.monitor.armed = False
            self._check_integrity("", threads, f"at {WHERE}")
            self._refuse_violations("", WHERE)
            # Host reads are refused, so an honest kernel cannot notice that its launches were
            # skipped; one that raises only then computed its answer some other way.
            raise Verdict("REJECTED", "", f"ghost replay at {WHERE}: kernel_fn raised "
                          f"only when its Triton launches were skipped "
                          f"({exception_summary(exc, self.kernel_path)}), so they do not "
                          "compute its output", "ghost-replay") from None
        finally:
            self.monitor.ghost = self.monitor.armed = False
        self._check_integrity("", threads, f"at {WHERE}")
        self._refuse_violations("", WHERE)
        return out

    # -- timing ------------------------------------------------------------------------------------

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
                int(message["out_nbytes"][k]), pool))
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
                    budget_s: float, out_nbytes: int,
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
            pool.append((index, output_digest(out)))

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

