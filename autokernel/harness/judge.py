"""The judge: computes every reference, holds every tolerance, and decides the verdict.

It runs in the worker process, the parent of the candidate process (`candidate`) and, when an
incumbent is timed alongside, of the incumbent's own process; it never imports candidate code.
The candidate cannot reach anything here: it is another process, sandboxed, and this one is
non-dumpable (its memory and /proc entries are closed to a process of the same user). What
crosses from the candidate is checked before use (`judge_channel`): the verdict is this
process's alone. The order:

1. Read the job. Send each candidate process its setup (poison, private Triton cache, sandbox,
   import); meanwhile plan the cases, make every input from keyed-hash seeds of the job's secret
   (`seeds`) and compute the reference outputs on upcast inputs, then, on a GPU, compile the
   torch.compile baseline here, where no candidate can reach it.
2. Run the five stages (`cases.STAGES`): for each case, hand the inputs over (on a GPU in
   dedicated allocations, `dedicated`), have the kernel called with every detector armed, copy
   the output into this process's own memory at once and compare that copy with the registry's
   tolerance, then have the call replayed with every Triton launch skipped ("ghost"), which must
   not still give the right answer. A few outputs are kept and re-read at the end: one changed
   since its call (a late write, a reused buffer) is a FAIL.
3. Time candidate, incumbent and baselines in interleaved batches (`judge_timing`): every timed
   output lands in memory this process owns; some are picked at random and compared in full;
   every batch's reported times are bounded by this process's clock.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from autokernel.harness import channel
from autokernel.harness.aot_gate import take_requests
from autokernel.harness.cases import DETERMINISM_REPEATS, NONFINITE, STAGES, Case, plan_cases
from autokernel.harness.compare import Mismatch
from autokernel.harness.dedicated import BASE_ALIGN_BYTES, BASE_SLOTS, DedicatedBuffer, share_like
from autokernel.harness.guards import Poison
from autokernel.harness.inputs import (
    generator, inject_nonfinite, make_inputs, relayout, splice, tensors,
)
from autokernel.harness.judge_channel import CandidateGone, Endpoint
from autokernel.harness.judge_timing import JudgeTiming
from autokernel.harness.outputs import (
    as_outputs, check_outputs, clone_outputs, ghost_proves_nothing, outputs_bitwise_equal,
)
from autokernel.harness.protocol import Job, WorkerReport
from autokernel.harness.seeds import case_seed, derive_seed
from autokernel.harness.untrusted import NOTE_CHARS, candidate_text
from autokernel.harness.verdict import Verdict, gib, oom_summary
from autokernel.ops import get_spec
from autokernel.ops.spec import Inputs, Shape, dtype_name, parse_dtype
from autokernel.text import count_of

# References are computed in float64 when all inputs together are at most this many elements.
FP64_REFERENCE_MAX_ELEMENTS = 1 << 22
# References live on the device up to this share of its free memory, then in host memory (the
# comparison moves them back a chunk at a time): a huge shape's dozen cases must not fill it.
REFERENCE_DEVICE_SHARE = 0.25
# Device memory the harness may plan with, in bytes, when less than what is free (and a cap the
# CPU interpreter honours too: inputs of a case past it count as out of memory).
MEMORY_CAP_ENV = "AUTOKERNEL_MEMORY_CAP_BYTES"
# Outputs kept by the candidate process and re-read at the end (besides the first smoke output):
# each correctness call is picked with this chance, up to KEPT_OUTPUTS, outputs up to
# KEPT_MAX_BYTES each.
KEEP_CHANCE = 0.2
KEPT_OUTPUTS = 4
KEPT_MAX_BYTES = 64 * 2**20
# How long a candidate process that closed its channel may take to exit before it is killed
# (one that closed it and lives on could otherwise hold the verdict back forever).
EXIT_GRACE_S = 10.0

_perf_counter = time.perf_counter


@dataclass
class Prepared:
    """A case whose inputs can be regenerated and whose reference is already known. For a type
    with several outputs (`OpSpec.outputs`), `ref`, `out_shape` and `out_dtype` are tuples with
    one entry per output."""

    case: Case
    seed: int
    ref: Any
    out_shape: Any
    out_dtype: Any

    @property
    def layout(self) -> list[list[Any]]:
        """[[bytes, dtype name]] of each output (what the candidate process poisons)."""
        shapes = self.out_shape if isinstance(self.out_dtype, tuple) else (self.out_shape,)
        dtypes = self.out_dtype if isinstance(self.out_dtype, tuple) else (self.out_dtype,)
        return [[_nbytes(shape, dtype), dtype_name(dtype)] for shape, dtype in zip(shapes, dtypes)]


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    numel = 1
    for d in shape:
        numel *= d
    return numel * torch.empty((), dtype=dtype).element_size()


class Judge(JudgeTiming):
    def __init__(self, job: Job, candidate: Endpoint, incumbent: Endpoint | None) -> None:
        self.job = job
        self.candidate = candidate
        self.incumbent = incumbent
        self.report = WorkerReport(status="PASS")
        self.stage = "setup"
        self.where = ""
        self.kept: list[tuple[str, Any, Any]] = []  # (where, the output as received, a copy)
        self.shared: list[DedicatedBuffer] = []  # the current inputs' dedicated allocations
        self.phase_started = _perf_counter()

    # -- bookkeeping ------------------------------------------------------------------------------

    def _phase(self, name: str) -> None:
        now = _perf_counter()
        self.report.phase_seconds[name] = round(now - self.phase_started, 3)
        self.phase_started = now

    def run(self) -> WorkerReport:
        try:
            self._setup()
            self.candidate.send("setup", **self._candidate_job(self.job.kernel_path))
            if self.incumbent is not None:
                self.incumbent.send("setup", **self._candidate_job(self.job.incumbent_path))
            self._prepare_references()
            self._prepare_baselines()
            self.stage = "import"
            self._take_sandbox(self.candidate.receive("import"))
            self._phase("candidate_setup")
            for stage in STAGES:
                self.stage = stage
                if self.job.only_stages is not None and stage not in self.job.only_stages:
                    self.report.stages[stage] = "skip"
                    continue
                self._run_stage(stage)
                self.report.stages[stage] = "pass"
            self._phase("correctness")
            self._take_aot_requests()
            if self.job.correctness_only:  # a draft's check (test_kernel): a verdict, no speed
                self.report.stages["timing"] = "skip"
                self.report.notes.append("correctness only: not timed")
            else:
                self.stage = "timing"
                self._run_timing()
                self.report.stages["timing"] = "pass"
            self.stage = "edge_sizes" if self.job.correctness_only else "timing"
            self._reread_kept()
        except torch.OutOfMemoryError as exc:  # the judge's own allocations: a clean CRASH
            self._fail(Verdict("CRASH", self.stage, f"out of memory during {self.stage}: "
                               f"{oom_summary(exc)}"))
        except Verdict as verdict:
            self._fail(verdict)
        except (CandidateGone, channel.BadMessage) as exc:
            self._fail(Verdict("CRASH", "worker", self._candidate_death(exc)))
        if self.report.status != "PASS":
            self.report.timings = []
        return self.report

    def _fail(self, verdict: Verdict) -> None:
        self.report.status = verdict.status
        self.report.stage = verdict.stage
        self.report.reason = verdict.reason
        self.report.rule = verdict.rule
        self.report.detail = verdict.detail
        self.report.stages[verdict.stage] = "fail"
        for stage in (*STAGES, "timing"):
            self.report.stages.setdefault(stage, "skip")

    def _candidate_death(self, exc: Exception) -> str:
        """Why the candidate process stopped answering, by its exit status."""
        if isinstance(exc, channel.BadMessage):
            return (f"the candidate process sent a malformed message during {self.stage}: "
                    f"{candidate_text(exc)}")
        self.candidate.resume()  # a stopped process never exits
        try:
            deadline = time.monotonic() + EXIT_GRACE_S
            pid, status = os.waitpid(self.candidate.pid, os.WNOHANG)
            while pid == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
                pid, status = os.waitpid(self.candidate.pid, os.WNOHANG)
            if pid == 0:  # alive and silent: it broke the protocol, and is ended here
                os.kill(self.candidate.pid, signal.SIGKILL)
                pid, status = os.waitpid(self.candidate.pid, 0)
        except ChildProcessError:
            return f"the candidate process vanished during {self.stage}"
        self.candidate.pid = 0
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            return f"the candidate process was killed by {name} during {self.stage}"
        return (f"the candidate process exited with status {os.WEXITSTATUS(status)} during "
                f"{self.stage}")

    def _take_sandbox(self, reply: dict[str, Any]) -> None:
        """The sandbox layers the candidate process says it applied (what /proc shows of them
        is checked in `sandbox.observed_confinement`; Landlock is not visible from outside)."""
        state = reply["sandbox"]
        if not isinstance(state, dict):
            raise channel.BadMessage("a sandbox state that is not an object")
        applied = state.get("applied") if isinstance(state.get("applied"), dict) else {}
        missing = state.get("missing") if isinstance(state.get("missing"), dict) else {}
        self.report.sandbox = {
            "applied": {candidate_text(k, 40): candidate_text(v, NOTE_CHARS)
                        for k, v in list(applied.items())[:16]},
            "missing": {candidate_text(k, 40): candidate_text(v, NOTE_CHARS)
                        for k, v in list(missing.items())[:16]},
            "complete": not missing}
        if missing:
            self.report.notes.append("sandbox incomplete: " + "; ".join(
                f"{name} not applied ({why})" for name, why in
                self.report.sandbox["missing"].items()))

    def close(self) -> None:
        """Tell the candidate processes to exit (the runner then ends the worker's whole tree)."""
        for endpoint in (self.candidate, self.incumbent):
            if endpoint is not None and endpoint.pid:
                endpoint.resume()
                endpoint.close()

    # -- talking to the candidate process ---------------------------------------------------------

    def _ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request to the candidate process and its checked reply."""
        return self.candidate.ask(op, self.stage, self.where, **fields)

    def _candidate_job(self, kernel_path: str | None) -> dict[str, Any]:
        job = self.job
        return {"kernel_path": kernel_path, "kernel_type": job.kernel_type,
                "device": job.device, "poison": self.poison.to_dict(),
                "prebuilt": job.prebuilt}

    def _call(self, prepared: Prepared, where: str, **options: Any) -> Any:
        """The kernel's output on the inputs last handed over, copied into this process's own
        memory at once (the candidate can no longer change what is compared), or a
        Mismatch-ready description of what it returned instead of a tensor."""
        self.where = where
        keep = options.pop("keep", False) or self._keep_this(prepared)
        if self.device.type == "cpu" and not options.get("ghost"):
            options["record"] = where  # the launches, for the sm_90 compile gate (aot_gate)
        reply = self._ask("call", outputs=prepared.layout, keep=keep, **options)
        self.last_storage = reply.get("storage")
        out = reply.get("out")
        if out is None:
            return _NotATensor(candidate_text(reply.get("type", "something else"), 200),
                               reply.get("subclass") is True)
        if self.spec.outputs > 1:
            if not isinstance(out, list) or len(out) != self.spec.outputs or \
                    not all(isinstance(t, torch.Tensor) for t in out):
                raise channel.BadMessage("outputs that are not a list of tensor descriptors")
            storage = self.last_storage
            if not isinstance(storage, list) or not all(type(p) is int for p in storage):
                raise channel.BadMessage("output storages that are not a list of ints")
            self.last_storage = tuple(storage)  # hashable, like one output's pointer
            out = tuple(out)
        elif not isinstance(out, torch.Tensor) or type(self.last_storage) is not int:
            raise channel.BadMessage("an output that is not a tensor descriptor")
        private = clone_outputs(out) if self.device.type == "cuda" else out
        if keep:
            self.kept.append((where, out if self.device.type == "cuda" else None, private))
        return private

    def _take_aot_requests(self) -> None:
        if self.device.type == "cpu":  # every correctness call's launches, for `aot_gate`
            self.report.aot_requests = take_requests(self._ask("aot_requests")["requests"])

    def _keep_this(self, prepared: Prepared) -> bool:
        """Whether this call's output is kept for the late re-read (chosen here, unseen)."""
        small = all(nbytes <= KEPT_MAX_BYTES for nbytes, _ in prepared.layout)
        return (small and len(self.kept) < KEPT_OUTPUTS
                and secrets.randbelow(1000) < KEEP_CHANCE * 1000)

    def _reread_kept(self) -> None:
        """Every kept output must still hold what it held when its call returned: a kernel that
        writes an output later (a thread, a queued kernel) or hands a buffer out again fails."""
        if not self.kept:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            now = [mapped for _, mapped, _ in self.kept]
        else:
            outs = self._ask("kept")["outs"]
            if not isinstance(outs, list) or len(outs) != len(self.kept):
                raise channel.BadMessage("the kept outputs do not match the calls that kept them")
            now = [tuple(o) if isinstance(o, list) else o for o in outs]
        for (where, _, copy), current in zip(self.kept, now):
            if not outputs_bitwise_equal(current, copy):
                raise Verdict("FAIL", self.stage, f"an output changed after its call returned "
                              f"(the {where} output, re-read at the end): kernel_fn writes an "
                              "output after returning it, or hands out a buffer it already "
                              "returned")
        self.kept.clear()

    def _hand_over(self, inputs: Inputs, grad: str = "plain") -> None:
        """The candidate's next inputs; the previous ones' allocations are freed once it has let
        go of them (it unmaps them before taking the new ones)."""
        shared, buffers = self._shareable(inputs)
        self._ask("inputs", inputs=shared, grad=grad)  # grad: the call's autograd context
        self._free_shared()
        self.shared = buffers

    def _release(self) -> None:
        self._ask("release")
        self._free_shared()

    def _free_shared(self, buffers: list[DedicatedBuffer] | None = None) -> None:
        for buffer in self.shared if buffers is None else buffers:
            buffer.free()
        if buffers is None:
            self.shared = []

    def _shareable(self, inputs: Inputs) -> tuple[list[Any], list[DedicatedBuffer]]:
        """On a GPU, each input tensor in a dedicated allocation of its own, its storage at a
        base the judge draws (so the candidate sees a new address at each call, as a night's
        caching allocator gives it: `dedicated`); on the CPU, as they are (they cross as bytes,
        into fresh memory)."""
        if self.device.type != "cuda":
            return list(inputs), []
        shared: list[Any] = []
        buffers: list[DedicatedBuffer] = []
        for value in inputs:
            if isinstance(value, torch.Tensor) and value.numel():
                base = secrets.randbelow(BASE_SLOTS) * BASE_ALIGN_BYTES
                buffer, tensor = share_like(value, base)
                buffers.append(buffer)
                shared.append(channel.Shared(buffer, tensor))
            else:
                shared.append(value)
        torch.cuda.synchronize()
        return shared, buffers

    # -- step 1: cases and references -------------------------------------------------------------

    def _setup(self) -> None:
        import triton

        job = self.job
        self.device = torch.device("cuda", 0) if job.device == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:
            torch.set_num_threads(1)
        self.spec = get_spec(job.kernel_type)
        self.poison = Poison.fresh()
        self.tolerances = {dtype: self.spec.tolerance(dtype, job.params)
                           for dtype in self.spec.dtypes}
        self.params = dict(job.params)
        self.dtypes = [parse_dtype(d) for d in job.correctness_dtypes]
        self.timing_shapes = [tuple(s) for s in job.timing_shapes]
        self.timed = [(shape, parse_dtype(dtype)) for shape in self.timing_shapes
                      for dtype in job.timing_dtypes]
        self.model_shapes = [tuple(s) for s in job.model_shapes]
        self.cases = plan_cases(self.spec, job.device, self.dtypes, self.timing_shapes,
                                self.model_shapes, job.quick,
                                random.Random(derive_seed(job.seed, "plan")),
                                [parse_dtype(d) for d in job.timing_dtypes])
        self.report.torch_version = torch.__version__
        self.report.triton_version = triton.__version__
        _gpu_details(self.report, self.device)
        self._phase("setup")

    def _make(self, shape: Shape, dtype: torch.dtype, gen: torch.Generator,
              distribution: str = "normal", adversarial: str | None = None) -> Inputs:
        return make_inputs(self.spec, shape, dtype, self.device, gen, self.params,
                           distribution, adversarial)

    def _case_inputs(self, case: Case, seed: int) -> Inputs:
        inputs = self._make(case.shape, case.dtype, generator(self.device, seed),
                            case.distribution, case.adversarial)
        if case.inject == NONFINITE:
            inputs = inject_nonfinite(inputs, generator(self.device, derive_seed(
                self.job.seed, "inject", seed)))
        if case.layout is not None:
            inputs = relayout(inputs, case.layout)
        if case.splice_from is not None:
            base = self.cases[case.splice_from]
            old = self._make(base.shape, base.dtype,
                             generator(self.device, case_seed(self.job.seed, case.splice_from)),
                             base.distribution, base.adversarial)
            inputs = splice(inputs, old)
        return inputs

    def _reference(self, inputs: Inputs) -> torch.Tensor:
        floats = [t for t in tensors(inputs) if t.dtype.is_floating_point]
        wide = sum(t.numel() for t in floats) <= FP64_REFERENCE_MAX_ELEMENTS
        target = torch.float64 if wide else torch.float32
        upcast = tuple(t.to(target) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point
                       else t for t in inputs)
        with torch.no_grad():
            out = self.spec.reference(*upcast)
        return tuple(t.detach() for t in out) if self.spec.outputs > 1 else out.detach()

    def _expected_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The output dtype for inputs of `dtype`: the reference's, run once on the smoke shape
        without upcasting (cross_entropy returns float32 whatever its logits' dtype)."""
        if dtype not in self.expected_dtypes:
            small = self._make(self.spec.smoke_shape, dtype, generator(self.device, 0))
            with torch.no_grad():
                out = self.spec.reference(*small)
            self.expected_dtypes[dtype] = tuple(t.dtype for t in out) \
                if self.spec.outputs > 1 else out.dtype
        return self.expected_dtypes[dtype]

    def _prepare(self, case: Case, seed: int, inputs: Inputs | None = None) -> Prepared:
        inputs = self._case_inputs(case, seed) if inputs is None else inputs
        needed = sum(t.numel() * t.element_size() for t in tensors(inputs))
        if needed > self.memory_budget:
            raise torch.OutOfMemoryError(f"the inputs need {gib(needed)}, more than the "
                                         f"{gib(self.memory_budget)} cap ({MEMORY_CAP_ENV})")
        ref = self._reference(inputs)  # upcasting changes the dtype, never the shape
        del inputs
        if self.spec.outputs > 1:
            return Prepared(case, seed, tuple(self._place_reference(r) for r in ref),
                            tuple(tuple(r.shape) for r in ref), self._expected_dtype(case.dtype))
        return Prepared(case, seed, self._place_reference(ref), tuple(ref.shape),
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
        self.prepared: list[Prepared] = []
        skipped: list[str] = []
        for i, case in enumerate(self.cases):
            try:
                self.prepared.append(self._prepare(case, case_seed(self.job.seed, i)))
            except torch.OutOfMemoryError as exc:
                what = case.describe(self.spec)
                if tuple(case.shape) in required:
                    raise Verdict("CRASH", case.stage, f"out of memory preparing {what}, a shape "
                                  f"the kernel must be judged at: {oom_summary(exc)}") from None
                skipped.append(what)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        if skipped:
            self.report.notes.append(f"{count_of(len(skipped), 'case')} of the registry's sweep "
                                     f"skipped: out of memory ({'; '.join(skipped[:4])})")
        if self.references_in_host:
            self.report.notes.append(
                f"{count_of(self.references_in_host, 'reference')} "
                f"({gib(self.reference_bytes_in_host)}) "
                f"kept in host memory: past {REFERENCE_DEVICE_SHARE:.0%} of the "
                f"{gib(self.memory_budget)} of device memory the harness plans with")
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self._phase("references")

    # -- step 3: the five stages -------------------------------------------------------------------

    def _check(self, prepared: Prepared, out: Any, where: str, stage: str | None = None,
               rule: str | None = None, prefix: str = "") -> None:
        mismatch = self._mismatch(prepared, out)
        if mismatch is None:
            return
        if mismatch.kind == "type" and isinstance(out, _NotATensor) and out.is_tensor_subclass:
            raise Verdict("REJECTED", stage or self.stage, f"lazy output at {where}: "
                          f"{mismatch.detail}", "tensor-subclass")
        raise Verdict("FAIL", stage or self.stage, f"{prefix}{where}: {mismatch.detail}", rule)

    def _mismatch(self, prepared: Prepared, out: Any, exhaustive: bool = True,
                  poison: Poison | None = None) -> Mismatch | None:
        count = self.spec.outputs
        if isinstance(out, _NotATensor):
            expected = "a plain torch.Tensor" if count == 1 else \
                f"a tuple of {count} plain torch.Tensors"
            return Mismatch("type", f"returned {out.type_name}, not {expected}")
        return check_outputs(out, prepared.ref, prepared.out_shape, prepared.out_dtype, count,
                             self.device, self.tolerances[prepared.case.dtype], exhaustive,
                             poison or self.poison, self.spec.cancelling)

    def _ghost_replay(self, prepared: Prepared, where: str) -> None:
        """The same inputs with every Triton launch skipped: the output must then be wrong."""
        out = self._call(prepared, where, ghost=True)
        # Unwritten memory reads as such (`Poison.recognisable`); a zero-filled output is correct
        # only where the answer is 0 (cross-entropy at V = 1), and proves nothing there.
        if not ghost_proves_nothing(out, prepared.ref) and self._mismatch(
                prepared, out, exhaustive=False, poison=self.poison.recognisable()) is None:
            raise Verdict("REJECTED", self.stage, f"ghost replay at {where}: the output is "
                          "still correct with every Triton launch (and CUDA launcher call) "
                          "skipped, so this call's kernels do not compute it (a host-side or "
                          "library fallback, or a cached result replayed)", "ghost-replay")

    def _run_stage(self, stage: str) -> None:
        cases = [p for p in self.prepared if p.case.stage == stage]
        if stage == "determinism":
            self._run_determinism(cases)
        else:
            for prepared in cases:
                where = prepared.case.describe(self.spec)
                case = prepared.case
                self._hand_over(self._case_inputs(case, prepared.seed), case.grad)
                # The first smoke output is kept by the candidate process until the end: a
                # kernel that hands out a pool of buffers overwrites it.
                first = stage == "smoke" and not self.kept
                out = self._call(prepared, where, keep=first)
                self._check(prepared, out, where)
                del out
                self._ghost_replay(prepared, where)
                self._release()
        self.report.stage_cases[stage] = len(cases)

    def _run_determinism(self, cases: list[Prepared]) -> None:
        by_dtype: dict[torch.dtype, dict[str, Prepared]] = {}
        for prepared in cases:
            by_dtype.setdefault(prepared.case.dtype, {})[prepared.case.label] = prepared
        for group in by_dtype.values():
            repeat, refill, fresh = group["repeat"], group["refill"], group["new_buffers"]
            where = repeat.case.describe(self.spec)
            self._hand_over(self._case_inputs(repeat.case, repeat.seed), repeat.case.grad)
            outputs, storages = [], set()
            for attempt in range(DETERMINISM_REPEATS):
                here = f"{where} call {attempt + 1}"
                out = self._call(repeat, here, hold=True)
                self._check(repeat, out, here)
                outputs.append(out)
                storages.update(as_outputs(self.last_storage))
            if len(storages) != len(outputs) * self.spec.outputs:
                raise Verdict("FAIL", self.stage, f"{where}: kernel_fn returned the same buffer "
                              "from different calls (outputs must be fresh tensors)")
            for attempt, out in enumerate(outputs[1:], start=2):
                if not outputs_bitwise_equal(outputs[0], out):
                    raise Verdict("FAIL", self.stage, f"{where}: call {attempt} differs bitwise "
                                  "from call 1 on the same input (nondeterministic, or reads "
                                  "uninitialised memory)")
            del outputs
            self.last_storage = None

            # The same tensor objects, refilled: a pointer- or fingerprint-keyed cache replays.
            where = refill.case.describe(self.spec)
            values, buffers = self._shareable(self._case_inputs(refill.case, refill.seed))
            self._ask("refill", values=values)
            self._free_shared(buffers)
            out = self._call(refill, where)
            self._check(refill, out, f"{where} (same buffers, new values)")
            del out
            self._release()

            where = fresh.case.describe(self.spec)
            self._hand_over(self._case_inputs(fresh.case, fresh.seed), fresh.case.grad)
            out = self._call(fresh, where)
            self._check(fresh, out, where)
            del out
            self._release()


class _NotATensor:
    """What the candidate returned instead of a plain tensor, by type name."""

    def __init__(self, type_name: str, is_tensor_subclass: bool) -> None:
        self.type_name = type_name[:200]
        self.is_tensor_subclass = is_tensor_subclass


def _gpu_details(report: WorkerReport, device: torch.device) -> None:
    """Device name, GPU spec and measured ceilings."""
    if device.type != "cuda":
        report.device_name = "cpu (Triton interpreter)"
        return
    from autokernel.gpu.calibrate import get_ceilings
    from autokernel.gpu.database import detect_gpu

    report.device_name = torch.cuda.get_device_name(device)
    gpu = detect_gpu(device.index or 0)
    report.gpu_spec = asdict(gpu) if gpu is not None else None
    try:
        ceilings = get_ceilings(device.index or 0)
        report.ceilings = asdict(ceilings) if ceilings is not None else None
    except Exception as exc:  # a failed calibration must not cost the verdict
        report.notes.append(f"measured ceilings unavailable: {exc}")
