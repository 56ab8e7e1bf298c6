"""The candidate process's timing half: batches of guarded calls that the judge orders and bounds.

The judge owns every timed call's inputs and output memory. On a GPU it shares them once per
timed shape as dedicated allocations (`slots`): each batch names the slots to use; every output is
copied into its slot right after the call's end event, outside the timed interval. On the CPU the
judge sends each batch's inputs (`stage`) and takes the outputs back (`batch_outputs`), each
copied right after its call. A batch
is what `timing` describes for one contestant: a spin the judge chose, then for each call a flush,
an event, the guarded call, an event; one synchronize. The reply's device times are the ones the
judge holds against its own clock (`judge_timing`); nothing here decides a figure.

`CandidateTiming` is a part of `autokernel.harness.candidate.Candidate` (its base class): it uses
the state the candidate process set up (the job, the loaded kernel, the guards) and the guarded-
call helpers defined there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autokernel.harness.compare import bits
from autokernel.harness.dedicated import OpenedBuffer
from autokernel.harness.guards import launch_digest, live_threads, new_threads
from autokernel.harness.inputs import tensors
from autokernel.harness.outputs import tuple_problem
from autokernel.harness.timing import Spinner, make_flush_buffer, run_batch, synced_calls
from autokernel.harness.untrusted import candidate_number
from autokernel.harness.verdict import NO_LAUNCH, Verdict, exception_detail, exception_summary
from autokernel.ops.spec import dtype_name, parse_dtype

_synchronize = torch.cuda.synchronize


class CandidateTiming:
    """The timing requests and their helpers; the attributes they read (job, device, spec, the
    loaded kernel, the monitor and recorder) are set by `Candidate`'s setup."""

    def timing_handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {"profile": self._profile, "synced": self._synced, "slots": self._slots,
                "stage": self._stage, "batch": self._batch, "batch_outputs": self._batch_outputs,
                "end_slots": self._end_slots}

    # -- figures the judge only reports: launch digest, peak memory, host cost --------------------

    def _profile(self, message: dict[str, Any]) -> dict[str, Any]:
        """On the held inputs: what one call launches (a digest) and, on a GPU, the memory a
        bare call allocates beyond its inputs. The guarded call's output goes back: the judge
        checks it like any other call's."""
        where = str(message.get("where", "timing"))
        self.monitor.signatures = []
        try:
            checked = self._timed_wrapper(where)(*self.inputs)
            self._sync()
            digest = launch_digest(self.monitor.signatures)
        finally:
            self.monitor.signatures = None
        peak = None
        if self.device.type == "cuda":
            assert self.kernel_fn is not None
            _synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
            allocated = torch.cuda.memory_allocated(self.device)
            out = self.kernel_fn(*self.inputs)
            _synchronize()
            peak = round((torch.cuda.max_memory_allocated(self.device) - allocated) / 2**20, 3)
            del out
        return {"digest": digest, "peak_vram_mb": peak,
                "out": list(checked) if isinstance(checked, tuple) else checked}

    def _synced(self, message: dict[str, Any]) -> dict[str, Any]:
        """Bare synchronized calls on the held inputs: wall times and the device's tail after
        each (host launch cost and hidden work; see `timing.synced_calls`)."""
        assert self.kernel_fn is not None
        inputs = self.inputs
        calls = synced_calls(self.kernel_fn, lambda: inputs, self.device,
                             self._flush_buffer(), int(message.get("calls", 10)))
        return {"wall_us": calls.wall_us, "tail_us": calls.tail_us}

    def _flush_buffer(self) -> torch.Tensor | None:
        if getattr(self, "flush", None) is None:
            self.flush = make_flush_buffer(self.device)
        return self.flush

    # -- the judge's slots -------------------------------------------------------------------------

    def _slots(self, message: dict[str, Any]) -> dict[str, Any]:
        self._timed_state()
        self._end_slots({})
        self.where = str(message["where"])
        self.timed_call = self._timed_wrapper(self.where)
        self.slot_shapes = [(tuple(shape), parse_dtype(dtype)) for shape, dtype in
                            message["shapes"]]
        if self.device.type == "cuda":
            self.slot_inputs = [tuple(x) for x in message["inputs"]]
            self.slot_outputs = [list(x) for x in message["outputs"]]
            self.slot_buffers, self.incoming[:] = list(self.incoming), []
            self._flush_buffer()
            if getattr(self, "spinner", None) is None:
                self.spinner = Spinner()
        self.staged: list[tuple[Any, ...]] = []
        self.batch_outs: list[Any] = []
        return {}

    def _end_slots(self, _: dict[str, Any]) -> dict[str, Any]:
        self.slot_inputs, self.slot_outputs = [], []
        self.staged, self.batch_outs = [], []
        self._sync()
        for buffer in getattr(self, "slot_buffers", []):
            buffer.close()
        self.slot_buffers: list[OpenedBuffer] = []
        return {}

    def _stage(self, message: dict[str, Any]) -> dict[str, Any]:
        """The CPU's way in: the next batch's inputs, one tuple per call."""
        self.staged = [tuple(x) for x in message["inputs"]]
        return {}

    def _batch(self, message: dict[str, Any]) -> dict[str, Any]:
        spin_us = candidate_number(message["spin_us"], "spin", high=1e6)
        if self.device.type == "cuda":
            calls = [int(i) for i in message["calls"]]
            outputs = [self.slot_outputs[i] for i in calls]
            times = run_batch(self.timed_call, [self.slot_inputs[i] for i in calls], self.flush,
                              self.spinner, spin_us,
                              lambda i, out: self._into_slot(out, outputs[i]))
        else:
            staged, self.staged, outs = self.staged, [], []
            saved = [[bits(t).clone() for t in tensors(args)] for args in staged]
            times = run_batch(self.timed_call, staged, None, None, 0.0,
                              lambda i, out: outs.append(self._on_host(out)))
            for args, before in zip(staged, saved):
                if not all(torch.equal(bits(t), b) for t, b in zip(tensors(args), before)):
                    raise Verdict("REJECTED", "timing", f"input mutation at {self.where}: a "
                                  "timed call modified its inputs", "input-mutation")
            self.batch_outs = outs
        # Checked by the next request (outside the judge's clock on this batch): `_timed_state`.
        self.callable_state.note(staged if self.device.type != "cuda"
                                 else [self.slot_inputs[int(i)] for i in message["calls"]])
        return {"device_us": times.device_us, "host_us": times.host_us, "ahead": times.ahead}

    def _timed_state(self) -> None:
        """Module state after the timed calls since the last check (`guards.state`): unchanged
        unless one had a new signature. Asked by the request after a batch (the CPU's outputs,
        the next shape's slots, the kept outputs), never inside a batch's sync-to-sync time."""
        state = getattr(self, "callable_state", None)
        found = state.changes([]) if state is not None and state.pending else []
        if found:
            raise Verdict("REJECTED", "timing", f"state kept across calls at {self.where}: "
                          f"{found[0]}", "call-time-state")

    def _on_host(self, out: Any) -> Any:
        """A timed output copied as it is right after its call (the GPU's slot copy): the
        judge compares what the call returned, and the late re-read catches a buffer that the
        kernel hands out again."""
        self._check_shapes(out)
        return [t.clone() for t in out] if isinstance(out, tuple) else out.clone()

    def _batch_outputs(self, _: dict[str, Any]) -> dict[str, Any]:
        self._timed_state()
        outs, self.batch_outs = self.batch_outs, []
        return {"outputs": outs}

    def _check_shapes(self, out: Any) -> None:
        got = list(out) if isinstance(out, (tuple, list)) else [out]
        for t, (shape, dtype) in zip(got, self.slot_shapes):
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise Verdict("FAIL", "timing", f"{self.where}: a timed call returned "
                              f"{dtype_name(t.dtype)} {list(t.shape)}, expected "
                              f"{dtype_name(dtype)} {list(shape)}")

    def _into_slot(self, out: Any, slots: list[torch.Tensor]) -> None:
        """A timed output into the judge's memory (after the call's end event)."""
        self._check_shapes(out)
        got = list(out) if isinstance(out, (tuple, list)) else [out]
        for t, slot in zip(got, slots):
            slot.copy_(t)

    def _timed_wrapper(self, where: str) -> Callable[..., Any]:
        """kernel_fn with the guards every timed call gets: launch monitor armed, op recorder on
        (allocations unpoisoned: a fill would add device time), and the host-only checks after
        each call (a launch happened, no compute op, no thread left running, a plain tensor
        returned)."""
        monitor, recorder, kernel_path = self.monitor, self.recorder, self.kernel_path
        kernel_fn = self.kernel_fn
        assert kernel_fn is not None
        outputs = self.spec.outputs

        def call(*args: Any) -> Any:
            threads = live_threads()
            launches = monitor.launches
            recorder.reset()
            recorder.poison_allocations = False
            monitor.armed = True
            try:
                with recorder:
                    out = kernel_fn(*args)
            except BaseException as exc:
                monitor.armed = False
                self._refuse_violations("timing", where)
                raise Verdict("CRASH", "timing", f"{where}: "
                              + exception_summary(exc, kernel_path),
                              detail=exception_detail(exc, kernel_path)) from None
            finally:
                monitor.armed = False
                recorder.poison_allocations = True
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
                return tuple(out)
            if type(out) is not torch.Tensor:  # noqa: E721
                if isinstance(out, torch.Tensor):
                    raise Verdict("REJECTED", "timing", f"lazy output at {where}: returned "
                                  f"{type(out).__qualname__}", "tensor-subclass")
                raise Verdict("FAIL", "timing", f"{where}: returned {type(out).__qualname__}, "
                              "not a tensor")
            return out

        return call
