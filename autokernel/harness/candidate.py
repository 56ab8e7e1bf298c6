"""The candidate process: the only process that imports a candidate `kernel.py`.

It is a child of the worker (`autokernel.harness.worker`), and the judge, its parent, drives it
over a socket (`channel`). It holds no reference answer, tolerance, case list, seed or audit
choice: it is handed one set of inputs at a time, calls the kernel with every detector armed,
and hands the output back for the judge to compare. The incumbent (the current best kernel) runs
in a process of its own, the same code with another file: neither can reach the other's timing.

Every request carries a sequence number; every reply echoes it and is exactly one of
`{"ok": {...}}` (the data the request asked for), `{"violation": {...}}` (a detector fired: a
FAIL, REJECTED or CRASH, never anything better), `{"oom": ...}` or `{"harness_error": ...}`. The
judge checks each against what it asked for (`judge_channel`) and believes no figure it cannot
check itself.

1. `setup`: CUDA, the job's poison, the launch monitor and op recorder, then the OS sandbox
   (irreversible, with a private Triton cache in this process's own directory), then the
   candidate's import, checked for tampering.
2. `inputs`, `refill`, `call`: one guarded call of kernel_fn (allocator poisoned, inputs
   checksummed, aten ops recorded, Triton launches counted and their stream checked, OS threads
   compared, identities re-verified), or its ghost replay with every Triton launch skipped.
3. Timing (`candidate_timing`): batches of guarded calls on inputs the judge owns, each output
   copied into memory the judge owns; the judge's clock bounds what this process reports.
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
from autokernel.harness.candidate_timing import CandidateTiming
from autokernel.harness.compare import bits
from autokernel.harness.dedicated import OpenedBuffer
from autokernel.harness.guards import (
    FallbackRecorder, IdentitySnapshot, LaunchMonitor, Poison, PoisonFiller, harness_namespaces,
    live_threads, new_threads, poison_allocator, poison_free_cache,
)
from autokernel.harness.guards.state import CallableState
from autokernel.harness.guards.threads import start_thread_pools
from autokernel.harness.grad_context import in_context, inputs_in_context
from autokernel.harness.inputs import tensors
from autokernel.harness.outputs import aliasing, returned_type, tuple_problem
from autokernel.harness.probe import self_test
from autokernel.harness.verdict import (
    NO_LAUNCH, WHERE, Verdict, exception_detail, exception_summary,
)
from autokernel.ops import get_spec
from autokernel.ops.spec import Inputs, parse_dtype

CANDIDATE_MODULE = "candidate_kernel"

_perf_counter = time.perf_counter


def output_layout(value: Any) -> list[tuple[int, torch.dtype]]:
    """[(bytes, dtype)] of each output the judge expects, from a call request."""
    if not isinstance(value, list):
        raise ValueError("output sizes must be a list")
    return [(int(nbytes), parse_dtype(str(dtype))) for nbytes, dtype in value]


class Candidate(CandidateTiming):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.device = torch.device("cpu")
        self.kernel_fn: Callable[..., Any] | None = None
        self.inputs: Inputs = ()
        self.received: Inputs = ()  # the inputs as they came, before their autograd context
        self.grad = "plain"
        self.input_buffers: list[OpenedBuffer] = []
        self.incoming: list[OpenedBuffer] = []
        self.held: list[Any] = []
        self.kept: list[Any] = []
        self.sandbox_state: dict[str, Any] = {}
        self.aot: list[dict[str, Any]] = []

    def serve(self) -> None:
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "setup": self._setup, "inputs": self._take_inputs, "refill": self._refill,
            "call": self._call, "release": self._release, "kept": self._send_kept,
            "aot_requests": self._aot_requests,
            **self.timing_handlers()}
        while True:
            try:
                message = channel.receive(self.sock, self.device, channel.CANDIDATE_ACCEPTS,
                                          self.incoming)
            except channel.ChannelClosed:
                return
            op, seq = message.get("op"), message.get("seq")
            if op == "exit":
                return
            try:
                reply: dict[str, Any] = {"ok": handlers[str(op)](message)}
            except Verdict as verdict:
                reply = {"violation": verdict.to_dict()}
            except torch.OutOfMemoryError as exc:
                reply = {"oom": str(exc).strip().splitlines()[0][:300] if str(exc) else "OOM"}
            except Exception:  # a bug on this side, or one a candidate provoked: not a pass
                reply = {"harness_error": traceback.format_exc(limit=-3).strip()[-1500:]}
            channel.send(self.sock, {"seq": seq, **reply})
            if self.device.type == "cuda":
                torch.cuda.ipc_collect()  # outputs the judge has let go of

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # -- setup: everything trusted, then the sandbox, then the candidate --------------------------

    def _setup(self, job: dict[str, Any]) -> dict[str, Any]:
        self.job = job
        self.device = torch.device("cuda", 0) if job["device"] == "cuda" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:
            # The production thread count (torch's default for this machine): a kernel must not
            # be able to tell the harness by torch.get_num_threads() == 1. The pools are started
            # now, so their threads exist before any call is watched.
            start_thread_pools()
        self.spec = get_spec(job["kernel_type"])
        self.kernel_path = job["kernel_path"]
        poison = Poison.from_dict(job["poison"])
        self.filler = PoisonFiller(poison, self.device)
        self.ghost_filler = PoisonFiller(poison.recognisable(), self.device)
        self._load_candidate()
        return {"sandbox": self.sandbox_state}

    def _load_candidate(self) -> None:
        self.monitor = LaunchMonitor(self.job["device"])
        self.monitor.install()
        self.recorder = FallbackRecorder(self.monitor, self.device)
        self.recorder.filler = self.filler
        self_test(self.monitor, self.recorder, self.device)
        prebuilt = self.job.get("prebuilt") or {}
        if prebuilt:  # builds the runner made: each backend loads its own, and forbids others
            from autokernel.backends import backend

            for name, entries in prebuilt.items():
                backend(name).prepare_candidate(entries)
        self._confine()
        poison_free_cache(self.device, self.filler)
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
        self.callable_state = CallableState.take(module)

    def _confine(self) -> None:
        """The OS sandbox, last thing before the candidate is imported (it is irreversible: no
        exec but the compiler toolchain, reads only of the installs, writes only in this
        process's directory, where its private Triton cache is; no network, no setsid).
        What could not be applied is said in the report."""
        from autokernel.harness import sandbox

        device = self.job["device"]
        sandbox.warm_triton_driver(device)
        writable = [Path(os.environ["TRITON_CACHE_DIR"])] \
            if os.environ.get("TRITON_CACHE_DIR") else []
        if device == "cuda" and Path("/dev/shm").is_dir():
            writable.append(Path("/dev/shm"))  # CUDA IPC's ref counters
        state = sandbox.apply_candidate_sandbox(
            Path.cwd(), writable=writable, executables=sandbox.toolchain_executables(device),
            device=device, readable=sandbox.candidate_readable(Path.cwd(), device))
        self.sandbox_state = state.to_dict()
        if device == "cuda":
            blocked = sandbox.toolchain_probe(Path.cwd())
            if blocked is not None:
                raise Verdict("CRASH", "harness", "the sandbox stops the C compiler Triton builds "
                              f"every kernel's launcher with ({blocked}); name the programs it "
                              f"runs in {sandbox.EXTRA_EXEC_ENV} (':'-separated), see `autokernel "
                              "doctor`")

    def _check_integrity(self, stage: str, threads_before: set[int], where: str) -> None:
        tampered = self.snapshot.changes() + [f"{h} hook removed"
                                              for h in self.monitor.tampered()]
        state = getattr(self, "callable_state", None)
        if state is not None:  # growth allowed after a call with a new signature only
            tampered += state.changes([self.inputs])
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

    def _close_inputs(self) -> None:
        self.inputs = self.received = ()
        self._sync()
        for buffer in self.input_buffers:
            buffer.close()
        self.input_buffers = []

    def _take_inputs(self, message: dict[str, Any]) -> dict[str, Any]:
        self._close_inputs()
        self.received = tuple(message["inputs"])
        # The call's autograd context (`grad_context`): inference tensors, or ones that require
        # grad, over the same memory.
        self.grad = str(message.get("grad") or "plain")
        self.inputs = inputs_in_context(self.received, self.grad)
        self.input_buffers, self.incoming[:] = list(self.incoming), []
        return {}

    def _refill(self, message: dict[str, Any]) -> dict[str, Any]:
        """New values into the held input tensors: the same objects, so a pointer- or
        identity-keyed cache would replay."""
        with torch.no_grad():  # into the memory under any autograd context's tensors
            for buffer, value in zip(tensors(self.received), tensors(tuple(message["values"]))):
                buffer.copy_(value)
        self._sync()
        for opened in self.incoming:
            opened.close()
        self.incoming.clear()
        return {}

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        layout = output_layout(message["outputs"])
        if message.get("ghost"):
            out = self._ghost_call(layout)
        elif message.get("record"):  # every call's launches, for the sm_90 check (aot_gate)
            self.monitor.recorded = []
            try:
                out = self._guarded_call(self.inputs, layout, "", WHERE)
                recorded = self.monitor.recorded
            finally:
                self.monitor.recorded = None
            from autokernel.harness.aot_gate import requests_from_launches

            context = message["record"] if isinstance(message["record"], str) else "smoke"
            self.aot = requests_from_launches(recorded, context[:200], self.aot)
        else:
            out = self._guarded_call(self.inputs, layout, "", WHERE)
        out = _detached(out)  # compared as values (a requires_grad input's output)
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
        elif type(out) is not torch.Tensor:  # noqa: E721 - the judge says why that is wrong
            return {"out": None, "type": returned_type(out),
                    "subclass": isinstance(out, torch.Tensor)}
        if message.get("hold"):  # alive until "release": a reused buffer shows as one pointer
            self.held.append(out)
        if message.get("keep"):  # alive until the judge re-reads it at the end
            self.kept.append(out)
        if count > 1:
            return {"out": list(out), "storage": [t.untyped_storage().data_ptr() for t in out]}
        return {"out": out, "storage": out.untyped_storage().data_ptr()}

    def _release(self, _: dict[str, Any]) -> dict[str, Any]:
        self.held.clear()
        self._close_inputs()
        return {}

    def _send_kept(self, _: dict[str, Any]) -> dict[str, Any]:
        """The outputs held since their calls, for the judge to compare with its own copies
        (an output the kernel changes after returning it, or hands out again, shows)."""
        self._timed_state()  # the last timed calls' module state
        kept = [list(out) if isinstance(out, tuple) else out for out in self.kept]
        return {"outs": kept}

    def _aot_requests(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"requests": self.aot}

    def _poison_outputs(self, layout: list[tuple[int, torch.dtype]],
                        filler: PoisonFiller | None = None) -> None:
        for nbytes, dtype in layout:
            poison_allocator(nbytes, self.device, filler or self.filler, dtype,
                             blocks=2 * len(layout))

    def _guarded_call(self, inputs: Inputs, layout: list[tuple[int, torch.dtype]], stage: str,
                      where: str) -> Any:
        """One call of kernel_fn with every detector armed; returns its output unchecked."""
        assert self.kernel_fn is not None
        self._poison_outputs(layout)
        saved = [bits(t).clone() for t in tensors(inputs)]
        threads = live_threads()
        launches = self.monitor.launches
        self.recorder.reset()
        self.monitor.armed = True
        try:
            with self.recorder, in_context(self.grad, self.device.type):
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

    def _ghost_call(self, layout: list[tuple[int, torch.dtype]]) -> Any:
        """The held inputs again with every Triton launch skipped (the judge checks that the
        output is then wrong)."""
        assert self.kernel_fn is not None
        # Memory the judge can tell unwritten (`Poison.recognisable`), before and during the call.
        self._poison_outputs(layout, self.ghost_filler)
        threads = live_threads()
        self.recorder.reset()
        self.recorder.filler = self.ghost_filler
        self.monitor.ghost = self.monitor.armed = True
        try:
            with self.recorder, in_context(self.grad, self.device.type):
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
            self.recorder.filler = self.filler
        self._check_integrity("", threads, f"at {WHERE}")
        self._refuse_violations("", WHERE)
        return out


def _detached(out: Any) -> Any:
    """A plain tensor output (or a tuple's) detached from autograd; anything else as it is."""
    if type(out) is torch.Tensor:  # noqa: E721 - a subclass is the judge's to refuse
        return out.detach()
    if type(out) is tuple:  # noqa: E721
        return tuple(_detached(t) for t in out)
    return out
