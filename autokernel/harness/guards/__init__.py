"""Cheat detectors that run inside the worker, around every call of the candidate.

They are installed before the candidate is imported, and everything they rely on is captured
then too, so a candidate that replaces a torch function, the timer or one of these hooks is caught
by `IdentitySnapshot` rather than silently believed.

- `IdentitySnapshot`: the functions and classes of torch, triton, the clock and the harness itself,
  by identity. Any replacement (`torch.softmax = f`, `triton.testing.do_bench = f`,
  `time.perf_counter = f`, `torch.cuda.Event.elapsed_time = f`) is tampering. So is any
  `torch.library` registration made after it was taken (every one goes through
  `torch._C._dispatch_library`, watched from then on), a changed dispatcher table of an aten op,
  a Triton launch hook set in `triton.knobs`, and (reported with the rule name call-time-state)
  tensors made at call time and still held by the candidate module's state after a call.
- `LaunchMonitor`: wraps Triton's launch paths (`JITFunction.run`, the interpreter's
  `InterpretedFunction.run`, `CompiledKernel[grid]`) to count the candidate's own launches, to
  check that each runs on the harness's CUDA stream, and, in ghost mode, to skip them: a
  candidate whose output is still right with every launch skipped did not compute it in Triton
  (the "ghost replay" defence against token launches plus a host-side answer). It also watches
  `torch.cuda.Stream` creation and `torch.cuda.set_stream` while the candidate runs.
- `FallbackRecorder`: a TorchDispatchMode that records every op the candidate runs outside its
  Triton launches. Only torch's own `aten::` allocation, layout and copy ops are allowed
  (`ALLOWED_ATEN_OPS`), by namespace and overload as they existed before the candidate was
  imported and with the dispatcher kernels they had then: anything that computes is a library
  fallback, and so is an op of the candidate's own (`torch.library.custom_op`), a new overload
  of an allowed op, or an allowed op whose kernel was re-registered. Inside a launch only the
  few ops Triton's launcher itself runs are allowed (`TRITON_LAUNCH_OPS`): anything else there was
  put there by a launch hook. While it records, `HostReadGuard` (a TorchFunctionMode) makes every
  host read of a tensor's values (`numpy()`, `tolist()`, `item()`, `float()`, numpy's
  `__array__`, dlpack, storages) raise: numpy or Python compute behind a token launch.
- `HostWriteLedger` (CPU correctness calls, kept by the recorder): every storage a launch or a
  torch op touched must hold the bytes the last of them left, at the next one and at the end of
  the call; a change neither made is host compute on raw memory (ctypes, numpy over an address).
- `Poison`, `poison_allocator` / `poison_free_cache`: fill the memory the candidate's output will
  come from with the job's own poison (a random NaN pattern per dtype, or random bytes, drawn for
  each job: no fixed pattern tells the harness apart), so an output element the kernel never
  writes can be seen, and a freed buffer holding an earlier answer is never handed out again.
- `live_threads` / `new_threads`: the process's OS threads, from /proc/self/task (a thread
  started through `_thread` or native code is invisible to `threading.enumerate`).

One module per guard: `launches` (LaunchMonitor), `host_reads` (HostReadGuard), `host_writes` (HostWriteLedger), `fallbacks`
(FallbackRecorder), `identity` (IdentitySnapshot, the registration watch, Triton's launch hooks),
`retained` (tensors a candidate module keeps), `poison`, `threads`; with `ops` (the allow-lists
and dispatcher tables), `frames` (whose code a frame is) and `namespaces` (what the snapshot
holds). Import the names from this package.
"""

from autokernel.harness.guards.fallbacks import FallbackRecorder
from autokernel.harness.guards.host_reads import HostReadError, HostReadGuard
from autokernel.harness.guards.identity import (
    KNOB_HOOKS, TORCH_REBINDS_LAZILY, IdentitySnapshot, RegistrationWatch, knob_hooks,
    watch_registrations,
)
from autokernel.harness.guards.launches import LaunchMonitor, launch_digest
from autokernel.harness.guards.namespaces import harness_namespaces
from autokernel.harness.guards.ops import (
    ALLOWED_ATEN_OPS, DEVICE_CHECKED_OPS, HOST_READ_METHODS, POISONED_ALLOCATIONS,
    TRITON_LAUNCH_OPS, allowed_op_tables, dispatch_tables,
)
from autokernel.harness.guards.poison import (
    Poison, PoisonFiller, poison_allocator, poison_free_cache,
)
from autokernel.harness.guards.retained import module_tensors
from autokernel.harness.guards.threads import live_threads, new_threads

__all__ = [
    "ALLOWED_ATEN_OPS", "DEVICE_CHECKED_OPS", "HOST_READ_METHODS", "KNOB_HOOKS",
    "POISONED_ALLOCATIONS", "TORCH_REBINDS_LAZILY", "TRITON_LAUNCH_OPS", "FallbackRecorder",
    "HostReadError", "HostReadGuard", "IdentitySnapshot", "Poison", "PoisonFiller",
    "LaunchMonitor", "RegistrationWatch",
    "allowed_op_tables", "dispatch_tables", "harness_namespaces", "knob_hooks", "launch_digest",
    "live_threads", "module_tensors", "new_threads", "poison_allocator", "poison_free_cache",
    "watch_registrations",
]
