"""The worker: the only process that ever imports a candidate `kernel.py`.

`autokernel.harness.runner` spawns one per `autokernel bench` call (`python -m
autokernel.harness.worker`, in a new session, with a scrubbed environment, in a temporary directory
holding a copy of the kernel file), sends the job on stdin and reads one report from a private
pipe. The order inside is what makes the verdict trustworthy:

1. Read the job. Generate every input of every stage from the secret seed and compute the
   reference outputs (on upcast inputs) BEFORE the candidate exists; keep the references alive so
   their memory can never be handed to the candidate. Compile and warm the torch.compile baseline.
   Fill the allocator's free memory with poison.
2. Install the launch monitor, snapshot the identities of torch/triton/clock/harness functions,
   import the candidate, and verify nothing was replaced.
3. Run the five stages (`cases.STAGES`). Every call of the candidate is guarded: allocator
   poisoned, inputs checksummed, aten ops recorded, Triton launches counted and their stream
   checked, threads compared, identities re-verified; every output is compared with the registry's
   tolerance; then the call is replayed with every Triton launch skipped ("ghost"), which must not
   still produce the right answer.
4. Time candidate, eager and compiled stock, interleaved (`timing`), re-checking a secret sample of
   the outputs produced while timing against references computed in step 1.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from autokernel.harness.cases import (
    DETERMINISM_REPEATS, STAGES, Case, case_seed, plan_cases,
)
from autokernel.harness.compare import bits, bitwise_equal, check_output
from autokernel.harness.guards import (
    FallbackRecorder, IdentitySnapshot, LaunchMonitor, harness_namespaces, launch_digest,
    live_threads, new_threads, poison_allocator, poison_free_cache,
)
from autokernel.harness.probe import self_test
from autokernel.harness.protocol import Job, TimedShape, WorkerReport, baseline_key, encode_report
from autokernel.harness.paired import paired_speedup, round_ratios, too_noisy
from autokernel.harness.timing import (
    MAX_ROUNDS, DeviceTimer, Samples, Spinner, SyncedCalls, TimedRounds, hidden_work_reason, iqr,
    make_flush_buffer, median, rounds_for, synced_calls,
)
from autokernel.ops import get_spec
from autokernel.ops.spec import Inputs, Shape, dtype_name, parse_dtype

# References are computed in float64 when all inputs together are at most this many elements.
FP64_REFERENCE_MAX_ELEMENTS = 1 << 22
AUDITS_PER_TIMED_SHAPE = 3  # timed outputs re-checked against a trusted reference
# References live on the device up to this share of its free memory, then in host memory (the
# comparison moves them back a chunk at a time): a huge shape's dozen cases must not fill it.
REFERENCE_DEVICE_SHARE = 0.25
# Device memory the harness may plan with, in bytes, when less than what is free (and a cap the
# CPU interpreter honours too: inputs of a case past it count as out of memory).
MEMORY_CAP_ENV = "AUTOKERNEL_MEMORY_CAP_BYTES"
SPLICE_ELEMENTS = 4  # elements kept from the old input at each end in the "refill" probe
NO_LAUNCH = ("kernel_fn launched no Triton kernel (a launch-free shortcut is refused even where "
             "it is exact, as for N == 1: the harness judges the kernel, not the shortcut)")
CANDIDATE_MODULE = "candidate_kernel"
INCUMBENT_MODULE = "incumbent_kernel"

_perf_counter = time.perf_counter


class IncumbentFailed(Exception):
    """The incumbent raised while timed: the paired comparison is lost, not the verdict."""


class Verdict(Exception):
    """Ends the run with a non-PASS status."""

    def __init__(self, status: str, stage: str, reason: str, rule: str | None = None) -> None:
        super().__init__(reason)
        self.status, self.stage, self.reason, self.rule = status, stage, reason, rule


@dataclass
class Prepared:
    """A case whose inputs can be regenerated and whose reference is already known."""

    case: Case
    seed: int
    fingerprint: int
    ref: torch.Tensor
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype

    @property
    def out_nbytes(self) -> int:
        numel = 1
        for d in self.out_shape:
            numel *= d
        return numel * torch.empty((), dtype=self.out_dtype).element_size()


def _tensors(inputs: Inputs) -> list[torch.Tensor]:
    return [t for t in inputs if isinstance(t, torch.Tensor)]


def fingerprint(inputs: Inputs) -> int:
    """Exact integer digest of the inputs' bits (regenerated inputs must match it)."""
    digest = 0
    for t in _tensors(inputs):
        digest = (digest * 1_000_003 + int(bits(t).to(torch.int64).sum())) % (2**61 - 1)
    return digest


def _call_maker(maker: Callable[..., Inputs], shape: Shape, dtype: torch.dtype,
                device: torch.device, generator: torch.Generator, distribution: str,
                params: dict[str, Any]) -> Inputs:
    """make_inputs(shape, dtype, device, generator, distribution, **params it accepts)."""
    accepted = inspect.signature(maker).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    extra = {k: v for k, v in params.items() if takes_any or k in accepted}
    return maker(shape, dtype, device, generator, distribution, **extra)


def _splice(inputs: Inputs, old: Inputs) -> Inputs:
    """`inputs` with the first and last few elements of every tensor copied from `old`."""
    for new_t, old_t in zip(_tensors(inputs), _tensors(old)):
        k = min(SPLICE_ELEMENTS, new_t.numel() // 4)
        if k == 0 or new_t.shape != old_t.shape:
            continue
        # reshape, not view: an input may be a transposed or otherwise strided view.
        flat_new, flat_old = new_t.reshape(-1).clone(), old_t.reshape(-1)
        flat_new[:k] = flat_old[:k]
        flat_new[-k:] = flat_old[-k:]
        new_t.copy_(flat_new.view(new_t.shape))
    return inputs


def _relayout(inputs: Inputs, layout: str) -> Inputs:
    """The same values with every floating tensor of 2+ dims in `layout`'s memory order:
    "row_strided", rows 16 elements further apart than their length (a slice of a wider
    buffer); "transposed", the last two dims stored column-major (a `.t()` view)."""
    def moved(t: torch.Tensor) -> torch.Tensor:
        if t.ndim < 2 or not t.dtype.is_floating_point:
            return t
        if layout == "row_strided":
            wider = torch.empty((*t.shape[:-1], t.shape[-1] + 16), dtype=t.dtype,
                                device=t.device)
            view = wider[..., : t.shape[-1]]
        elif layout == "transposed":
            view = torch.empty((*t.shape[:-2], t.shape[-1], t.shape[-2]), dtype=t.dtype,
                               device=t.device).transpose(-1, -2)
        else:
            raise ValueError(f"unknown layout {layout!r}")
        return view.copy_(t)
    return tuple(moved(t) if isinstance(t, torch.Tensor) else t for t in inputs)


def _gib(nbytes: float) -> str:
    """A byte count in the largest binary unit it reaches (12.00 GiB, 64.0 KiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}" if unit == "GiB" else f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def _oom_summary(exc: BaseException) -> str:
    """torch's out-of-memory message, first sentence (it names what was asked and what is free)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _exception_summary(exc: BaseException, kernel_path: str) -> str:
    """'RuntimeError: message (kernel.py line 42)', the line being the candidate's last frame."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == kernel_path:
            line = lineno
    cause = exc.__cause__ or exc.__context__
    if line is None and cause is not None:
        for frame, lineno in traceback.walk_tb(cause.__traceback__):
            if frame.f_code.co_filename == kernel_path:
                line = lineno
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    where = f" (kernel.py line {line})" if line is not None else ""
    return f"{type(exc).__name__}: {message[:400]}{where}"


class Worker:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.report = WorkerReport(status="PASS")
        self.stage = "setup"
        self.kernel_fn: Callable[..., Any] | None = None
        self.incumbent_fn: Callable[..., Any] | None = None
        self.kept_output: tuple[str, Any, Any] | None = None
        self.phase_started = _perf_counter()

    # -- bookkeeping ------------------------------------------------------------------------------

    def _phase(self, name: str) -> None:
        now = _perf_counter()
        self.report.phase_seconds[name] = round(now - self.phase_started, 3)
        self.phase_started = now

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def run(self) -> WorkerReport:
        try:
            self._setup()
            self._prepare_references()
            self._prepare_timing()
            self._load_candidate()
            for stage in STAGES:
                self.stage = stage
                self._run_stage(stage)
                self.report.stages[stage] = "pass"
            self._check_kept_output()
            self._phase("correctness")
            self.stage = "timing"
            self._run_timing()
            self.report.stages["timing"] = "pass"
            self._phase("timing")
        except torch.OutOfMemoryError as exc:  # the harness's own allocations: a clean CRASH
            self._fail(Verdict("CRASH", self.stage, f"out of memory during {self.stage}: "
                               f"{_oom_summary(exc)}"))
        except Verdict as verdict:
            self._fail(verdict)
        return self.report

    def _fail(self, verdict: Verdict) -> None:
        self.report.status = verdict.status
        self.report.stage = verdict.stage
        self.report.reason = verdict.reason
        self.report.rule = verdict.rule
        self.report.stages[verdict.stage] = "fail"
        for stage in (*STAGES, "timing"):
            self.report.stages.setdefault(stage, "skip")

    # -- step 1: everything trusted, before the candidate exists ----------------------------------

    def _setup(self) -> None:
        import triton

        job = self.job
        self.device = torch.device("cuda", 0) if job.device == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:
            # The interpreter runs one program at a time; intra-op threads only add spin-waits
            # (measured: 20 ms per tiny op on a busy 2-core machine, 2 us with one thread).
            torch.set_num_threads(1)
        self.spec = get_spec(job.kernel_type)
        # Copied now: the registry's mapping is mutable, and the candidate comes later.
        self.tolerances = {dtype: self.spec.tolerance(dtype) for dtype in self.spec.dtypes}
        self.params = dict(job.params)
        self.dtypes = [parse_dtype(d) for d in job.correctness_dtypes]
        self.timing_dtypes = [parse_dtype(d) for d in job.timing_dtypes]
        self.timing_shapes = [tuple(s) for s in job.timing_shapes]
        self.model_shapes = [tuple(s) for s in job.model_shapes]
        self.cases = plan_cases(self.spec, job.device, self.dtypes, self.timing_shapes,
                                self.model_shapes, job.quick)
        self.report.torch_version = torch.__version__
        self.report.triton_version = triton.__version__
        self.gpu_name = "cpu"
        if self.device.type == "cuda":
            from autokernel.gpu.calibrate import get_ceilings
            from autokernel.gpu.database import detect_gpu

            self.gpu_name = torch.cuda.get_device_name(self.device)
            self.report.device_name = self.gpu_name
            gpu = detect_gpu(self.device.index or 0)
            self.report.gpu_spec = asdict(gpu) if gpu is not None else None
            try:
                ceilings = get_ceilings(self.device.index or 0)
                self.report.ceilings = asdict(ceilings) if ceilings is not None else None
            except Exception as exc:  # a failed calibration must not cost the verdict
                self.report.notes.append(f"measured ceilings unavailable: {exc}")
        else:
            self.report.device_name = "cpu (Triton interpreter)"
        self._phase("setup")

    def _generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    def _make(self, shape: Shape, dtype: torch.dtype, generator: torch.Generator,
              distribution: str = "normal", adversarial: str | None = None) -> Inputs:
        maker = self.spec.make_inputs
        if adversarial is not None:
            maker = next(a.make_inputs for a in self.spec.adversarial if a.name == adversarial)
        return _call_maker(maker, shape, dtype, self.device, generator, distribution,
                           self.params)

    def _case_inputs(self, case: Case, seed: int) -> Inputs:
        inputs = self._make(case.shape, case.dtype, self._generator(seed), case.distribution,
                            case.adversarial)
        if case.layout is not None:
            inputs = _relayout(inputs, case.layout)
        if case.splice_from is not None:
            base = self.cases[case.splice_from]
            old = self._make(base.shape, base.dtype,
                             self._generator(case_seed(self.job.seed, case.splice_from)),
                             base.distribution, base.adversarial)
            inputs = _splice(inputs, old)
        return inputs

    def _reference(self, inputs: Inputs) -> torch.Tensor:
        floats = [t for t in _tensors(inputs) if t.dtype.is_floating_point]
        wide = sum(t.numel() for t in floats) <= FP64_REFERENCE_MAX_ELEMENTS
        target = torch.float64 if wide else torch.float32
        upcast = tuple(t.to(target) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point
                       else t for t in inputs)
        with torch.no_grad():
            return self.spec.reference(*upcast).detach()

    def _expected_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The output dtype for inputs of `dtype`: the reference's, run once on the smoke shape
        without upcasting (cross_entropy returns float32 whatever its logits' dtype)."""
        if dtype not in self.expected_dtypes:
            small = self._make(self.spec.smoke_shape, dtype, self._generator(0))
            with torch.no_grad():
                self.expected_dtypes[dtype] = self.spec.reference(*small).dtype
        return self.expected_dtypes[dtype]

    def _prepare(self, case: Case, seed: int) -> Prepared:
        inputs = self._case_inputs(case, seed)
        needed = sum(t.numel() * t.element_size() for t in _tensors(inputs))
        if needed > self.memory_budget:
            raise torch.OutOfMemoryError(f"the inputs need {_gib(needed)}, more than the "
                                         f"{_gib(self.memory_budget)} cap ({MEMORY_CAP_ENV})")
        digest = fingerprint(inputs)
        ref = self._reference(inputs)  # upcasting changes the dtype, never the shape
        del inputs
        return Prepared(case, seed, digest, self._place_reference(ref), tuple(ref.shape),
                        self._expected_dtype(case.dtype))

    def _memory_budget(self) -> int:
        """Bytes of device memory the harness plans with: what is free now, or less when
        MEMORY_CAP_ENV says so (on the CPU interpreter, only the cap)."""
        cap = int(os.environ.get(MEMORY_CAP_ENV, "0") or 0)
        free = torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else 0
        budgets = [b for b in (cap, free) if b > 0]
        return min(budgets) if budgets else 1 << 62

    def _place_reference(self, ref: torch.Tensor) -> torch.Tensor:
        nbytes = ref.numel() * ref.element_size()
        if self.reference_bytes_on_device + nbytes <= REFERENCE_DEVICE_SHARE * self.memory_budget:
            self.reference_bytes_on_device += nbytes
            return ref
        self.references_in_host += 1
        self.reference_bytes_in_host += nbytes
        return ref.cpu() if ref.device.type != "cpu" else ref

    def _prepare_references(self) -> None:
        self.stage = "references"
        self.expected_dtypes: dict[torch.dtype, torch.dtype] = {}
        self.memory_budget = self._memory_budget()
        self.reference_bytes_on_device = self.reference_bytes_in_host = 0
        self.references_in_host = 0
        required = {tuple(s) for s in (*self.timing_shapes, *self.model_shapes,
                                       self.spec.smoke_shape)}
        self.prepared = []
        skipped: list[str] = []
        for i, case in enumerate(self.cases):
            try:
                self.prepared.append(self._prepare(case, case_seed(self.job.seed, i)))
            except torch.OutOfMemoryError as exc:
                what = case.describe(self.spec)
                if tuple(case.shape) in required:
                    raise Verdict("CRASH", case.stage, f"out of memory preparing {what}, a shape "
                                  f"the kernel must be judged at: {_oom_summary(exc)}") from None
                skipped.append(what)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        if skipped:
            self.report.notes.append(f"{len(skipped)} case(s) of the registry's sweep skipped: "
                                     f"out of memory ({'; '.join(skipped[:4])})")
        if self.references_in_host:
            self.report.notes.append(
                f"{self.references_in_host} reference(s) ({_gib(self.reference_bytes_in_host)}) "
                f"kept in host memory: past {REFERENCE_DEVICE_SHARE:.0%} of the "
                f"{_gib(self.memory_budget)} of device memory the harness plans with")
        self._sync()
        self._phase("references")

    def _prepare_timing(self) -> None:
        self.stage = "baselines"
        job = self.job
        self.timed = [(shape, dtype) for shape in self.timing_shapes
                      for dtype in self.timing_dtypes]
        self.audits: dict[tuple[Shape, torch.dtype], list[Prepared]] = {}
        self.compiled: dict[tuple[Shape, torch.dtype], Callable[..., Any]] = {}
        self.cached_compile: dict[tuple[Shape, torch.dtype], dict[str, Any]] = {}
        for k, (shape, dtype) in enumerate(self.timed):
            self.audits[(shape, dtype)] = [
                self._prepare(Case("timing", shape, dtype, f"audit {j}"),
                              case_seed(job.seed, 10_000 + 10 * k + j))
                for j in range(AUDITS_PER_TIMED_SHAPE)
            ]
        if self.device.type == "cuda":
            for shape, dtype in self.timed:
                key = self._baseline_key(shape, dtype)
                if key in job.cached_baselines:
                    self.cached_compile[(shape, dtype)] = job.cached_baselines[key]
                    continue
                compiled = self._compile_stock(shape, dtype)
                if compiled is not None:
                    self.compiled[(shape, dtype)] = compiled
        else:
            self.report.notes.append("torch.compile baseline skipped on the CPU interpreter")
        self.liger = None  # imported now, before the candidate exists, like the other baselines
        # Not for a quick sweep (the loop's screen): importing Liger costs seconds per worker,
        # and every keep's full sweep times it.
        if self.spec.liger is not None and self.device.type == "cuda" and not job.quick:
            try:
                self.liger = self.spec.liger()
            except Exception as exc:  # a broken optional install costs the baseline, not more
                self.report.notes.append(f"liger-kernel baseline unavailable: "
                                         f"{type(exc).__name__}: {str(exc)[:200]}")
        elif self.spec.liger is not None and self.device.type == "cuda":
            self.report.notes.append("liger-kernel baseline not timed on a quick sweep")
        self._sync()
        poisoned = poison_free_cache(self.device)
        if poisoned:
            self.report.notes.append(f"poisoned {poisoned / 2**20:.0f} MiB of free cached memory")
        self._phase("baselines")

    def _baseline_key(self, shape: Shape, dtype: torch.dtype) -> str:
        return baseline_key(self.job.kernel_type, list(shape), dtype_name(dtype), self.gpu_name,
                            torch.__version__, self.params)

    def _compile_stock(self, shape: Shape, dtype: torch.dtype) -> Callable[..., Any] | None:
        """torch.compile of the stock path (dynamic=False), compiled once and warmed."""
        try:
            import torch._dynamo

            for limit in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, limit):
                    setattr(torch._dynamo.config, limit, max(64, getattr(torch._dynamo.config,
                                                                         limit)))
            compiled = torch.compile(self.spec.stock, dynamic=False)
            inputs = self._make(shape, dtype, self._generator(case_seed(self.job.seed, 30_000)))
            for _ in range(2):
                compiled(*inputs)
            torch.cuda.synchronize()
            return compiled
        except Exception as exc:
            self.report.notes.append(f"torch.compile baseline unavailable at "
                                     f"{self.spec.format_shape(shape)} {dtype_name(dtype)}: "
                                     f"{type(exc).__name__}: {str(exc)[:200]}")
            return None

    # -- step 2: import the candidate --------------------------------------------------------------

    def _load_candidate(self) -> None:
        self.stage = "import"
        self.monitor = LaunchMonitor(self.job.device)
        self.monitor.install()
        self.recorder = FallbackRecorder(self.monitor, self.device)
        self_test(self.monitor, self.recorder, self.device)
        self._confine()
        self.snapshot = IdentitySnapshot.take(harness_namespaces(self.job.kernel_type))
        threads = live_threads()
        path = self.job.kernel_path
        module_spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
        if module_spec is None or module_spec.loader is None:
            raise Verdict("CRASH", "import", f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[CANDIDATE_MODULE] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException as exc:
            raise Verdict("CRASH", "import", "importing kernel.py raised "
                          + _exception_summary(exc, path)) from None
        self._check_integrity("import", threads, "while importing kernel.py")
        kernel_fn = getattr(module, "kernel_fn", None)
        if not callable(kernel_fn):
            raise Verdict("CRASH", "import", "kernel.py defines no callable kernel_fn")
        self.kernel_fn = kernel_fn
        self._phase("import")

    def _confine(self) -> None:
        """The OS sandbox, last thing before the candidate is imported (it is irreversible: no
        exec but the compiler toolchain, no writes outside the work directory and the Triton
        cache, no network, no setsid). What could not be applied is said in the report."""
        from autokernel.harness import sandbox

        sandbox.warm_triton_driver(self.job.device)
        cache = os.environ.get("TRITON_CACHE_DIR")
        state = sandbox.apply_candidate_sandbox(
            Path.cwd(), writable=[Path(cache)] if cache else [],
            executables=sandbox.toolchain_executables(self.job.device), device=self.job.device)
        self.report.sandbox = state.to_dict()
        if self.job.device == "cuda":
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

    # -- step 3: the five stages -------------------------------------------------------------------

    def _where(self, prepared: Prepared) -> str:
        return prepared.case.describe(self.spec)

    def _regenerate(self, prepared: Prepared) -> Inputs:
        inputs = self._case_inputs(prepared.case, prepared.seed)
        if fingerprint(inputs) != prepared.fingerprint:
            raise Verdict("REJECTED", self.stage, "tampering: the harness's input generator "
                          "gives different values since kernel.py was imported", "tampering")
        return inputs

    def _guarded_call(self, inputs: Inputs, out_nbytes: int, where: str) -> Any:
        """One call of kernel_fn with every detector armed; returns its output unchecked."""
        assert self.kernel_fn is not None
        poison_allocator(out_nbytes, self.device)
        saved = [bits(t).clone() for t in _tensors(inputs)]
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
            self._check_integrity(self.stage, threads, f"at {where}")
            self._refuse_violations(self.stage, where)
            raise Verdict("CRASH", self.stage, f"{where}: "
                          + _exception_summary(exc, self.job.kernel_path)) from None
        finally:
            self.monitor.armed = False
        self._check_integrity(self.stage, threads, f"at {where}")
        self._refuse_violations(self.stage, where)
        if self.monitor.launches == launches:
            raise Verdict("REJECTED", self.stage, f"library fallback at {where}: {NO_LAUNCH}",
                          "library-fallback")
        for position, (tensor, before) in enumerate(zip(_tensors(inputs), saved)):
            if not torch.equal(bits(tensor), before):
                raise Verdict("REJECTED", self.stage, f"input mutation at {where}: kernel_fn "
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

    def _check(self, prepared: Prepared, out: Any, where: str) -> None:
        mismatch = check_output(out, prepared.ref, prepared.out_shape, prepared.out_dtype,
                                self.device, self.tolerances[prepared.case.dtype])
        if mismatch is None:
            return
        if mismatch.kind == "type" and isinstance(out, torch.Tensor):
            raise Verdict("REJECTED", self.stage, f"lazy output at {where}: {mismatch.detail}",
                          "tensor-subclass")
        raise Verdict("FAIL", self.stage, f"{where}: {mismatch.detail}")

    def _ghost_replay(self, prepared: Prepared, inputs: Inputs, where: str) -> None:
        """Call again with every Triton launch skipped: the output must then be wrong."""
        assert self.kernel_fn is not None
        poison_allocator(prepared.out_nbytes, self.device)
        threads = live_threads()
        self.recorder.reset()
        self.monitor.ghost = self.monitor.armed = True
        try:
            with self.recorder:
                out = self.kernel_fn(*inputs)
            self._sync()
        except Exception as exc:
            self.monitor.ghost = self.monitor.armed = False
            self._check_integrity(self.stage, threads, f"at {where}")
            self._refuse_violations(self.stage, where)
            # Host reads are refused, so an honest kernel cannot notice that its launches were
            # skipped; one that raises only then computed its answer some other way.
            raise Verdict("REJECTED", self.stage, f"ghost replay at {where}: kernel_fn raised "
                          f"only when its Triton launches were skipped "
                          f"({_exception_summary(exc, self.job.kernel_path)}), so they do not "
                          "compute its output", "ghost-replay") from None
        finally:
            self.monitor.ghost = self.monitor.armed = False
        self._check_integrity(self.stage, threads, f"at {where}")
        self._refuse_violations(self.stage, where)
        mismatch = check_output(out, prepared.ref, prepared.out_shape, prepared.out_dtype,
                                self.device, self.tolerances[prepared.case.dtype],
                                exhaustive=False)
        if mismatch is None:
            raise Verdict("REJECTED", self.stage, f"ghost replay at {where}: the output is "
                          "still correct with every Triton launch skipped, so this call's Triton "
                          "kernels do not compute it (a host-side or library fallback, or a "
                          "cached result replayed)", "ghost-replay")

    def _run_stage(self, stage: str) -> None:
        cases = [p for p in self.prepared if p.case.stage == stage]
        if stage == "determinism":
            self._run_determinism(cases)
        else:
            for prepared in cases:
                where = self._where(prepared)
                inputs = self._regenerate(prepared)
                out = self._guarded_call(inputs, prepared.out_nbytes, where)
                self._check(prepared, out, where)
                if stage == "smoke":  # held by the caller until every stage has run
                    self.kept_output = (where, out, out.clone())
                del out
                self._ghost_replay(prepared, inputs, where)
                del inputs
        self.report.stage_cases[stage] = len(cases)

    def _check_kept_output(self) -> None:
        """An output belongs to its caller: the smoke stage's, held through every later call,
        must not have changed (a kernel handing out a pool of buffers overwrites it)."""
        where, out, copy = self.kept_output
        self.kept_output = None
        if not bitwise_equal(out, copy):
            raise Verdict("FAIL", "edge_sizes", f"an earlier output changed after later calls "
                          f"(the {where} output, held by the harness): kernel_fn reuses output "
                          "buffers it has already returned")

    def _run_determinism(self, cases: list[Prepared]) -> None:
        by_dtype: dict[torch.dtype, dict[str, Prepared]] = {}
        for prepared in cases:
            by_dtype.setdefault(prepared.case.dtype, {})[prepared.case.label] = prepared
        for group in by_dtype.values():
            repeat, refill, fresh = group["repeat"], group["refill"], group["new_buffers"]
            where = self._where(repeat)
            inputs = self._regenerate(repeat)
            outputs = []
            for attempt in range(DETERMINISM_REPEATS):
                out = self._guarded_call(inputs, repeat.out_nbytes, f"{where} call {attempt + 1}")
                self._check(repeat, out, f"{where} call {attempt + 1}")
                outputs.append(out)
            storages = {o.untyped_storage().data_ptr() for o in outputs}
            if len(storages) != len(outputs):
                raise Verdict("FAIL", self.stage, f"{where}: kernel_fn returned the same buffer "
                              "from different calls (outputs must be fresh tensors)")
            for attempt, out in enumerate(outputs[1:], start=2):
                if not bitwise_equal(outputs[0], out):
                    raise Verdict("FAIL", self.stage, f"{where}: call {attempt} differs bitwise "
                                  "from call 1 on the same input (nondeterministic, or reads "
                                  "uninitialised memory)")
            del outputs

            # The same tensor objects, refilled: a pointer- or fingerprint-keyed cache replays.
            where = self._where(refill)
            new_values = self._regenerate(refill)
            for buffer, value in zip(_tensors(inputs), _tensors(new_values)):
                buffer.copy_(value)
            out = self._guarded_call(inputs, refill.out_nbytes, where)
            self._check(refill, out, f"{where} (same buffers, new values)")
            del out, inputs, new_values

            where = self._where(fresh)
            inputs = self._regenerate(fresh)
            out = self._guarded_call(inputs, fresh.out_nbytes, where)
            self._check(fresh, out, where)
            del out, inputs

    # -- step 4: timing ----------------------------------------------------------------------------

    def _load_incumbent(self) -> None:
        """The current best kernel, timed in the same rounds as the candidate (paired A/B).

        It passed the harness before; if it no longer loads, the comparison is lost, not the
        verdict."""
        path = self.job.incumbent_path
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
        inputs = self._make(shape, dtype, self._generator(case_seed(self.job.seed, 20_000)))
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

    def _run_timing(self) -> None:
        self._load_incumbent()
        self._record_launches()
        flush = make_flush_buffer(self.device)
        self.spinner = Spinner()
        for k, (shape, dtype) in enumerate(self.timed):
            budget = self.job.timing_budget_s if k == 0 else self.job.timing_budget_s / 2
            self.report.timings.append(self._time_shape(k, shape, dtype, flush, budget))
        if self.device.type != "cuda":
            self.report.notes.append("timings come from a host clock on the Triton interpreter "
                                     "and are not meaningful")

    def _timed_wrapper(self, kernel_fn: Callable[..., Any], where: str,
                       checked: bool) -> Callable[..., Any]:
        """kernel_fn with the guards every timed call gets: launch monitor armed, op recorder on
        (allocations unpoisoned: a fill would add device time), and, when `checked`, the
        host-only checks after each call (a launch happened, no compute op, no thread left
        running, a plain tensor returned). Input mutation and output audits are checked after
        the batch, outside the timed region."""
        monitor, recorder, kernel_path = self.monitor, self.recorder, self.job.kernel_path

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
                              + _exception_summary(exc, kernel_path)) from None
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

    def _time_shape(self, k: int, shape: Shape, dtype: torch.dtype,
                    flush: torch.Tensor | None, budget_s: float) -> TimedShape:
        assert self.kernel_fn is not None
        spec = self.spec
        where = f"timing [{spec.format_shape(shape)}] {dtype_name(dtype)}"
        generator = self._generator(case_seed(self.job.seed, 20_000 + k))
        audits = self.audits[(shape, dtype)]
        out_nbytes = audits[0].out_nbytes
        warm = self._make(shape, dtype, generator)
        out = self._guarded_call(warm, out_nbytes, where)  # warm-up, every detector armed
        del out
        input_bytes = sum(t.numel() * t.element_size() for t in _tensors(warm))

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
        audit_at: dict[int, Prepared] = {}
        produced: list[tuple[Prepared, torch.Tensor]] = []

        def prepare(r: int, name: str) -> tuple[Inputs, Any]:
            if name != "candidate":
                return self._make(shape, dtype, generator), None
            inputs = self._regenerate(audit_at[r]) if r in audit_at \
                else self._make(shape, dtype, generator)
            return inputs, (inputs, [bits(t).clone() for t in _tensors(inputs)])

        def after(r: int, name: str, out: Any, token: Any) -> None:
            if name != "candidate":
                return
            inputs, before = token
            if not all(torch.equal(bits(t), saved) for t, saved in zip(_tensors(inputs), before)):
                raise Verdict("REJECTED", "timing", f"input mutation at {where}: a timed call "
                              "modified its inputs", "input-mutation")
            if r in audit_at:
                produced.append((audit_at[r], out))

        def measure(entrants: list[tuple[str, Callable[..., Any]]]) -> tuple[TimedRounds, bool]:
            timer = DeviceTimer(entrants, prepare, after, self.device, flush, 2 * input_bytes,
                                self.spinner)
            rounds = rounds_for(budget_s, timer.pilot(), self.device, self.job.quick)
            # The audit schedule is secret, drawn once the number of rounds is known.
            chooser = secrets.SystemRandom()
            audit_rounds = sorted(chooser.sample(range(rounds - 1), len(audits) - 1)) \
                + [rounds - 1] if rounds > len(audits) else list(range(rounds))[-len(audits):]
            audit_at.clear()
            audit_at.update(zip(audit_rounds, audits))
            produced.clear()
            timed = timer.run(rounds)
            if not any(name == "incumbent" for name, _ in entrants) \
                    or not self._too_noisy(timed.samples):
                return timed, False
            audit_at.clear()
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
        self._audit(produced, dtype, where)
        produced.clear()
        samples = timed.samples
        candidate = samples["candidate"]
        synced = self._synced_calls(contestants, shape, dtype, generator, flush)
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
        return speedup is not None and too_noisy(speedup, 1.0 + self.job.min_gain)

    def _audit(self, produced: list[tuple[Prepared, torch.Tensor]], dtype: torch.dtype,
               where: str) -> None:
        """Timed outputs at secret rounds: right against the reference computed before the
        candidate existed, and bit for bit what a guarded call on the same inputs returns."""
        for prepared, out in produced:
            mismatch = check_output(out, prepared.ref, prepared.out_shape, prepared.out_dtype,
                                    self.device, self.tolerances[dtype])
            if mismatch is not None:
                raise Verdict("FAIL", "timing", f"an output produced while timing is wrong "
                              f"(replayed or drifting results) at {where}: {mismatch.detail}",
                              "replay")
            rerun = self._guarded_call(self._regenerate(prepared), prepared.out_nbytes,
                                       f"{where} (audit re-run)")
            if not bitwise_equal(out, rerun):
                raise Verdict("FAIL", "timing", f"an output produced while timing differs bit for "
                              f"bit from a checked call on the same inputs at {where}: timed "
                              "calls compute something else", "replay")

    def _synced_calls(self, contestants: list[tuple[str, Callable[..., Any]]], shape: Shape,
                      dtype: torch.dtype, generator: torch.Generator,
                      flush: torch.Tensor | None) -> dict[str, SyncedCalls]:
        """Host launch cost and hidden-work tails, from bare synchronous calls: the monitor and
        recorder off for every contestant alike, so the host figure is what a model would pay."""
        bare = {"candidate": self.kernel_fn, "incumbent": self.incumbent_fn}
        return {name: synced_calls(bare.get(name) or fn,
                                   lambda: self._make(shape, dtype, generator), self.device, flush)
                for name, fn in contestants}


def _stats(samples: Samples) -> tuple[float, float]:
    return median(samples.latency_us), iqr(samples.latency_us)


def main() -> None:
    job = Job.from_json(sys.stdin.buffer.read())
    channel = os.fdopen(job.result_fd, "w", encoding="utf-8")
    try:
        report = Worker(job).run()
    except BaseException:  # a bug in the harness, not a verdict on the candidate
        report = WorkerReport(status="CRASH", stage="harness",
                              reason="internal harness error: "
                                     + traceback.format_exc(limit=-3).strip()[-1500:])
    channel.write(encode_report(job.nonce, report))
    channel.flush()
    # Skip interpreter teardown: the candidate's atexit handlers or CUDA teardown must not be
    # able to change or delay the verdict once it is written.
    os._exit(0)


if __name__ == "__main__":
    main()
