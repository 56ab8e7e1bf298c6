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
from autokernel.harness.candidate_timing import CandidateTiming, _out_nbytes
from autokernel.harness.cases import case_seed
from autokernel.harness.compare import bits
from autokernel.harness.guards import (
    FallbackRecorder, IdentitySnapshot, LaunchMonitor, harness_namespaces, live_threads,
    new_threads, poison_free_cache,
)
from autokernel.harness.inputs import generator, make_inputs, tensors
from autokernel.harness.outputs import (
    aliasing, clone_outputs, outputs_bitwise_equal, poison_outputs, returned_type, tuple_problem,
)
from autokernel.harness.probe import self_test
from autokernel.harness.protocol import WorkerReport, baseline_key
from autokernel.harness.verdict import (
    NO_LAUNCH, WHERE, Verdict, exception_detail, exception_summary,
)
from autokernel.ops import get_spec
from autokernel.ops.spec import Inputs, Shape, dtype_name, parse_dtype

CANDIDATE_MODULE = "candidate_kernel"
# Seeds of the timing inputs nobody audits (baseline calls, launch record, host-cost calls), far
# from the per-call range TIMED_CALL_STRIDE * shape + call.
SEQUENTIAL_SEEDS = 900_000_000

_perf_counter = time.perf_counter


class Candidate(CandidateTiming):
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
        if self.job.get("cuda_prebuilt"):
            from autokernel.cuda.harness import prepare_candidate

            prepare_candidate(self.job["cuda_prebuilt"])
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
        out_nbytes = _out_nbytes(message["out_nbytes"])
        if message.get("ghost"):
            out = self._ghost_call(out_nbytes)
        else:
            out = self._guarded_call(self.inputs, out_nbytes, "", WHERE)
        count = self.spec.outputs
        if count > 1:  # a tuple of outputs, each checked as one is (`outputs`)
            problem = tuple_problem(out, count)
            if problem is not None:
                return {"out": None, "type": problem[0], "subclass": problem[1]}
            out = tuple(out)
            why = aliasing(out, tensors(self.inputs))
            if why is not None:
                raise Verdict("FAIL", "", f"{WHERE}: {why} (each output must be a fresh tensor "
                              "of its own)", "output-alias")
        if message.get("hold"):  # alive until "release": a reused buffer shows as one pointer
            self.held.append(out)
        if message.get("keep"):  # held, with a copy, until "check_kept"
            self.kept = (WHERE, out, clone_outputs(out))
        if count > 1:
            return {"out": list(out), "storage": [t.untyped_storage().data_ptr() for t in out]}
        if type(out) is not torch.Tensor:  # noqa: E721 - the judge says why that is wrong
            return {"out": None, "type": returned_type(out),
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
            if not outputs_bitwise_equal(out, copy):
                raise Verdict("FAIL", "edge_sizes", f"an earlier output changed after later "
                              f"calls (the {where} output, held by the harness): kernel_fn "
                              "reuses output buffers it has already returned")
        return {"ok": True}

    def _guarded_call(self, inputs: Inputs, out_nbytes: int | list[int], stage: str,
                      where: str) -> Any:
        """One call of kernel_fn with every detector armed; returns its output unchecked."""
        assert self.kernel_fn is not None
        poison_outputs(out_nbytes, self.device)
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

    def _ghost_call(self, out_nbytes: int | list[int]) -> Any:
        """The held inputs again with every Triton launch skipped (the judge checks that the
        output is then wrong)."""
        assert self.kernel_fn is not None
        poison_outputs(out_nbytes, self.device)
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
