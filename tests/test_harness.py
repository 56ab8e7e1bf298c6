"""The harness end to end: every adversarial kernel in tests/adversarial gets its non-PASS status
from the detector meant to catch it, and every honest kernel PASSes; plus the pure pieces (output
comparison, plausibility rule, statistics, protocol, environment scrubbing, case plan) on their own.

CPU runs use the Triton interpreter and the `quick` profile (fewer sweep and edge shapes; every
detector still runs); the shipped starters also run the full profile. GPU-only checks are marked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, HAS_CUDA
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.harness.cases import (
    BATCH_LAYOUT_TYPES, BATCH_LAYOUTS, LAYOUTS, NONFINITE_TYPES, STAGES, plan_cases,
)
from autokernel.harness.compare import bitwise_equal, check_output, ulp
from autokernel.harness.guards import Poison, PoisonFiller
from autokernel.harness.guards.poison import POISON_MODE_ENV
from autokernel.harness.protocol import (
    ChannelError,
    TimedShape,
    WorkerReport,
    baseline_key,
    decode_report,
    encode_report,
)
from autokernel.harness.result import BenchResult, Status
from autokernel.harness.runner import (
    BenchInputError,
    read_baseline_cache,
    run_bench,
    write_baseline_cache,
)
from autokernel.harness.sandbox import sandbox_capabilities
from autokernel.harness.spawn import candidate_env
from autokernel.harness.timing import (
    MAX_CALLS_PER_ROUND,
    SyncedCalls,
    calls_per_round_for,
    hidden_work_reason,
    impossible_reason,
    iqr,
    median,
    quantile,
)
from autokernel.kernels import starter_path
from autokernel.ops import get_spec
from autokernel.ops.spec import Tolerance

ADVERSARIAL_DIR = Path(__file__).parent / "adversarial"
TIMEOUT_S = 300.0


def bench(name: str | Path, tmp_path: Path, **options: object) -> BenchResult:
    path = name if isinstance(name, Path) else ADVERSARIAL_DIR / name
    options.setdefault("quick", True)
    return run_bench(path, device=DEVICE, timeout_s=TIMEOUT_S, cache_dir=tmp_path / "cache",
                     **options)


# -- every file in tests/adversarial, with the verdict it must get --------------------------------
# A host read of tensor values raises inside the call (the host-read guard); the violation it
# recorded, not the exception, is the verdict.
ON_CPU = DEVICE == "cpu"
HOST_READ = (Status.REJECTED, "library-fallback", "smoke", "a host read of tensor values")
# A host-memory probe is invisible on the CPU (all memory is host memory) until a timed call
# cheats; on a GPU the probe itself is a tensor off the device.
PROBE_FALLBACK = (Status.REJECTED, "library-fallback", "smoke", "softmax") if ON_CPU \
    else (Status.REJECTED, "library-fallback", "smoke", "off the harness's cuda device")
# On the CPU the probe's scrub (numpy zeroing the probe's raw memory) is a host write itself.
PROBE_INPLACE = (Status.REJECTED, "library-fallback", "smoke", "a host write to tensor memory") \
    if ON_CPU else PROBE_FALLBACK
KEPT_TENSORS = (Status.REJECTED, "call-time-state", "smoke", "[call-time-state]")
# The GPU's sweep holds a 50257-column row (a vocabulary) and its edges an N == 1 shape; the
# interpreter's small sweep meets these cheats at other stages.
# One element left unwritten: named by the job's NaN poison; random-bytes poison leaves a wrong
# value that is within fp16's tolerance of the small answer about a time in four (a random PASS).
NAN_POISON_ONLY = {"drops_wide_columns.py"}
WIDE_COLUMNS_DROPPED = (Status.FAIL, None, "edge_sizes", "N=32769") if ON_CPU \
    else (Status.FAIL, None, "shape_sweep", "")
DEGENERATE_SHORTCUT = (Status.REJECTED, "library-fallback", "shape_sweep" if ON_CPU
                       else "edge_sizes", "launch-free shortcut is refused even where it is exact")
# numpy reading a tensor's data_ptr as host memory: the interpreter's tensors are host memory, so
# the cheat computes, and its write into the output's memory, which no launch or torch op made,
# gives it away (guards/host_writes.py; the ghost replay's exception would too); a GPU pointer is
# not host-addressable, so the first read kills the worker.
RAW_DEVICE_POINTER = (
    (Status.REJECTED, "library-fallback", "smoke", "a host write to tensor memory")
    if ON_CPU else (Status.CRASH, None, "worker", "SIGSEGV"))

# The interpreter's `inspect` finds no reference in the candidate process (the judge holds them),
# and the kernel's own softmax, which skips the max subtraction, overflows; on a GPU there is no
# interpreter to lend `inspect`, and the name is unbound.
INSPECT_REFERENCE = (Status.FAIL, None, "stability", "NaN/Inf outputs") if ON_CPU \
    else (Status.CRASH, None, "smoke", "NameError")

# (file, static scan on?, status, rule, stage, text the reason must contain)
CPU_CASES: list[tuple[str, bool, Status, str | None, str | None, str]] = [
    ("fallback_torch.py", True, Status.REJECTED, "library-fallback", "smoke", "softmax"),
    ("token_launch_torch_answer.py", True, Status.REJECTED, "library-fallback", "smoke",
     "softmax"),
    ("token_launch_host_answer.py", True, Status.REJECTED, "host-readout", "static_scan",
     "numpy"),
    ("token_launch_host_answer.py", False, *HOST_READ),
    ("cache_by_pointer.py", True, Status.REJECTED, "call-time-state", "static_scan", "_RESULTS"),
    ("cache_by_pointer.py", False, *KEPT_TENSORS),
    ("cache_by_shape.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "mutable default"),
    ("cache_by_shape.py", False, *KEPT_TENSORS),
    ("cache_by_values.py", True, Status.REJECTED, "call-time-state", "static_scan", "_CALLS"),
    # Its call counter is module state, seen (guards/state.py) before the host read is.
    ("cache_by_values.py", False, Status.REJECTED, "call-time-state", "smoke", "_CALLS"),
    ("drift_after_checks.py", True, Status.REJECTED, "call-time-state", "static_scan", "_SEEN"),
    ("drift_after_checks.py", False, *KEPT_TENSORS),
    # State where neither the scan's module-level rule nor the module-state check looks (a
    # functools.cache'd holder): the ghost replay and the timing audits still catch it.
    ("cache_in_lru_holder.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "cached result of slot()"),
    ("cache_in_lru_holder.py", False, Status.REJECTED, "ghost-replay", "smoke", "cached result"),
    ("drift_in_lru_holder.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "cached result of tally()"),
    # Its tally is an lru_cache entry, fingerprinted with the module state (guards/state.py).
    ("drift_in_lru_holder.py", False, Status.REJECTED, "call-time-state", "smoke", "tally["),
    # Half the jobs poison with random bytes: an unwritten element is then just a wrong value.
    ("unwritten_output.py", True, Status.FAIL, None, "smoke", ""),
    ("ignores_strides.py", True, Status.FAIL, None, "edge_sizes", "layout:row_strided"),
    ("drops_wide_columns.py", True, *WIDE_COLUMNS_DROPPED),
    ("input_mutation.py", True, Status.REJECTED, "input-mutation", "smoke", "argument #0"),
    ("precision_downgrade.py", True, Status.FAIL, None, "shape_sweep", "fp32"),
    ("lazy_output.py", True, Status.REJECTED, "tensor-subclass", "static_scan", "Deferred"),
    ("lazy_output.py", False, Status.REJECTED, "tensor-subclass", "smoke", "not a plain"),
    ("tamper_softmax.py", True, Status.REJECTED, "monkeypatch", "static_scan", "torch.softmax"),
    ("tamper_softmax.py", False, Status.REJECTED, "tampering", "import", "torch.softmax"),
    ("tamper_do_bench.py", True, Status.REJECTED, "monkeypatch", "static_scan", "do_bench"),
    ("tamper_do_bench.py", False, Status.REJECTED, "tampering", "import", "do_bench"),
    ("tamper_perf_counter.py", True, Status.REJECTED, "import-not-allowed", "static_scan",
     "'time'"),
    ("tamper_perf_counter.py", False, Status.REJECTED, "tampering", "import", "perf_counter"),
    # triton.runtime.autotuner.time is the time module: a module off the allow-list.
    ("tamper_obfuscated.py", True, Status.REJECTED, "module-escape", "static_scan",
     "which is the module time"),
    ("tamper_obfuscated.py", False, Status.REJECTED, "tampering", "import", "perf_counter"),
    ("background_thread.py", True, Status.REJECTED, "import-not-allowed", "static_scan",
     "threading"),
    # The thread races kernel_fn's return: seen still running, or its write to the output seen
    # by the host-write ledger before kernel_fn returned (a rule per outcome, with its text).
    ("background_thread.py", False, Status.REJECTED,
     {"thread": "still running", "library-fallback": "host write"}, "smoke", ""),
    ("side_stream.py", True, Status.REJECTED, "side-stream", "static_scan", "Stream"),
    ("side_stream.py", False, Status.REJECTED, "side-stream", "smoke", "created a CUDA stream"),
    ("side_stream_generic.py", True, Status.REJECTED, "side-stream", "static_scan",
     "torch.Stream"),
    ("leaks_environment.py", True, Status.REJECTED, "import-not-allowed", "static_scan", "'os'"),
    ("crash_exception.py", True, Status.CRASH, None, "smoke", "deliberate failure"),
    ("honest_softmax.py", True, Status.PASS, None, None, ""),
    ("honest_rmsnorm_round_to_zero.py", True, Status.PASS, None, None, ""),
    # Issue 12, the second red team. Class 1: host compute through numpy or Python.
    ("host_numpy_inplace.py", True, Status.REJECTED, "host-readout", "static_scan",
     "work.numpy"),
    ("host_numpy_inplace.py", False, *HOST_READ),
    ("host_numpy_flag.py", True, Status.REJECTED, "host-readout", "static_scan", "flag.numpy"),
    ("host_numpy_flag.py", False, *HOST_READ),
    ("host_tolist_rmsnorm.py", True, Status.REJECTED, "host-readout", "static_scan", "tolist"),
    ("host_tolist_rmsnorm.py", False, *HOST_READ),
    ("host_array_interface.py", True, Status.REJECTED, "host-readout", "static_scan",
     "__array_interface__"),
    ("host_raw_flag_ghost_exception.py", True, Status.REJECTED, "host-readout", "static_scan",
     "__array_interface__"),
    ("host_raw_flag_ghost_exception.py", False, *RAW_DEVICE_POINTER),
    # Class 2: torch compute behind other names, or inside a launch.
    ("custom_op_softmax.py", True, Status.REJECTED, "op-registration", "static_scan",
     "custom_op"),
    ("custom_op_softmax.py", False, Status.REJECTED, "tampering", "import",
     "Library('akredteam', 'FRAGMENT') created"),
    ("aten_kernel_override.py", True, Status.REJECTED, "op-registration", "static_scan",
     "Library"),
    ("aten_kernel_override.py", False, Status.REJECTED, "tampering", "import",
     "aten::ones_like dispatcher kernels changed"),
    ("aten_new_overload.py", True, Status.REJECTED, "op-registration", "static_scan",
     "Library"),
    ("aten_new_overload.py", False, Status.REJECTED, "tampering", "import",
     "Library('aten', 'FRAGMENT') created"),
    ("pre_run_hook_exp.py", True, Status.REJECTED, "launch-hook", "static_scan",
     "add_pre_run_hook"),
    ("pre_run_hook_exp.py", False, Status.REJECTED, "library-fallback", "smoke",
     "pre-run hook"),
    ("pre_run_hook_list_rmsnorm.py", True, Status.REJECTED, "launch-hook", "static_scan",
     "pre_run_hooks"),
    ("pre_run_hook_list_rmsnorm.py", False, Status.REJECTED, "library-fallback", "smoke",
     "pre-run hook"),
    # Class 3: reaching into the judge.
    ("frame_walk_tolerance.py", True, Status.REJECTED, "introspection", "static_scan",
     "gi_frame"),
    ("frame_walk_globals.py", True, Status.REJECTED, "introspection", "static_scan", "cr_frame"),
    # With the scan off, the frames lead nowhere: the judge (references, tolerances, the
    # comparison) is another process, and each cheat's own Triton kernel is then judged as it is.
    ("frame_walk_tolerance.py", False, Status.FAIL, None, "smoke", "outside atol"),
    ("frame_walk_globals.py", False, Status.FAIL, None, "smoke", "outside atol"),
    ("interpreter_inspect_reference.py", True, Status.REJECTED, "undefined-name", "static_scan",
     "'inspect' is never bound"),
    ("interpreter_inspect_reference.py", False, *INSPECT_REFERENCE),
    ("gc_reference_hunt.py", True, Status.REJECTED, "import-not-allowed", "static_scan", "'gc'"),
    ("gc_reference_hunt.py", False, Status.FAIL, None, "smoke", "outside atol"),
    ("proc_parent_memory.py", True, Status.REJECTED, "import-not-allowed", "static_scan",
     "'os'"),
    ("proc_parent_memory.py", False, Status.CRASH, None, "smoke", "Permission denied"),
    # Class 4: escapes through allowed modules (their dynamic side is the sandbox's).
    ("escape_collect_env.py", True, Status.REJECTED, "module-escape", "static_scan",
     "collect_env"),
    ("escape_fromregex_parent_env.py", True, Status.REJECTED, "file-access", "static_scan",
     "fromregex"),
    # Its parent is the judge, non-dumpable, and the candidate holds no capability: even as root
    # it cannot open the judge's /proc entries.
    ("escape_fromregex_parent_env.py", False, Status.CRASH, None, "smoke", "Permission denied"),
    ("escape_open_memmap.py", True, Status.REJECTED, "file-access", "static_scan",
     "numpy.lib.format"),
    ("host_ctypeslib_raw_memory.py", True, Status.REJECTED, "module-escape", "static_scan",
     "ctypeslib"),
    # Class 5: processes that outlive the verdict (their dynamic side: own tests below).
    ("orphan_forged_verdict.py", True, Status.REJECTED, "module-escape", "static_scan",
     "collect_env"),
    ("orphan_same_group.py", True, Status.REJECTED, "module-escape", "static_scan",
     "collect_env"),
    # Class 6: telling timed calls from checked ones.
    ("timed_probe_torch_fallback.py", True, Status.REJECTED, "host-readout", "static_scan",
     "__array_interface__"),
    ("timed_probe_torch_fallback.py", False, *PROBE_FALLBACK),
    ("timed_probe_inplace_output.py", True, Status.REJECTED, "host-readout", "static_scan",
     "__array_interface__"),
    ("timed_probe_inplace_output.py", False, *PROBE_INPLACE),
    # Class 7: faulty kernels (the two that pass are pending registry cases).
    ("output_pool_rotation.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "defaultdict '_POOLS'"),
    ("output_pool_rotation.py", False, *KEPT_TENSORS),
    ("output_pool_preallocated.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "next(_TURNS)"),
    ("output_pool_preallocated.py", False, Status.REJECTED, "call-time-state", "smoke",
     "_TURNS changed"),
    # Exact, launch-free, refused; and the honest config caches.
    ("degenerate_shortcut.py", True, *DEGENERATE_SHORTCUT),
    ("honest_config_cache.py", True, Status.REJECTED, "call-time-state", "static_scan",
     "functools.cache"),
    ("honest_config_cache.py", False, Status.PASS, None, None, ""),
    ("honest_lru_config.py", True, Status.PASS, None, None, ""),
]

# Numpy computing on raw host memory (the output's address, on the CPU interpreter, where device
# memory is host memory): the static scan refuses these files; with it off, the host-write ledger
# (guards/host_writes.py) sees memory that changed with no launch and no torch op (a library
# fallback), unless, by coincidence, the ghost replay rejects first: at a one-column row softmax
# is 1 whatever the input, so a host softmax of the poison left where the skipped launch would
# have copied the input is still right when this job's poison is random bytes (half the jobs).
RAW_HOST_MEMORY = ("host_array_interface.py", "host_ctypeslib_raw_memory.py")

# Judged in their own tests below: the hang (TIMEOUT), the segfault (signal), the leak probe, the
# generic-stream cheat whose dynamic check needs CUDA streams, and the processes that outlive the
# verdict and the file written outside the work directory (side effects, not verdicts).
OWN_TESTS = {"hang.py", "segfault.py", "leaks_environment.py", "side_stream_generic.py",
             "orphan_forged_verdict.py", "orphan_same_group.py", "escape_open_memmap.py",
             *RAW_HOST_MEMORY}


@pytest.mark.skipif(not ON_CPU, reason="host memory is tensor memory on the CPU only")
@pytest.mark.parametrize("name", RAW_HOST_MEMORY)
def test_raw_host_memory_writes_are_refused_on_the_cpu(name: str, tmp_path: Path) -> None:
    result = bench(name, tmp_path, static_scan=False)
    assert result.status is Status.REJECTED, result.reason
    assert result.rule == "ghost-replay" or (
        result.rule == "library-fallback" and "host write" in result.reason), result.reason


FORGED_LINE_WAIT_S = 10.0


def _forged_lines(capfd: pytest.CaptureFixture[str], marker: str) -> list[str]:
    """Lines carrying `marker` written to this process's stdout within a few seconds: an orphan
    appends its forged verdict once the worker has exited."""
    deadline = time.monotonic() + FORGED_LINE_WAIT_S
    seen: list[str] = []
    while time.monotonic() < deadline and not seen:
        time.sleep(0.5)
        seen = [line for line in capfd.readouterr().out.splitlines() if marker in line]
    return seen


# The OS sandbox's layers on this machine (CI's machine has them all; a missing one is reported
# by `autokernel doctor` and in every verdict's notes, and these tests then assert less).
CAPABILITIES = sandbox_capabilities()
NO_EXEC = CAPABILITIES["seccomp"].available and CAPABILITIES["landlock_fs"].available


def _exec_refused(reason: str) -> bool:
    """seccomp refuses an exec where nothing may run (EPERM, the interpreter); Landlock refuses a
    program outside the toolchain (EACCES, on a GPU, where the compiler may run)."""
    return "not permitted" in reason or "Permission denied: '/bin/sh'" in reason


def test_an_orphan_in_the_workers_group_dies_with_it(tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    result = bench("orphan_same_group.py", tmp_path, static_scan=False)
    if NO_EXEC:  # the sandbox refuses the shell that would start the orphan
        assert result.status is Status.CRASH and _exec_refused(result.reason), result.reason
    else:  # the spawner's sweep still kills what was started
        assert result.status is Status.PASS, result.reason
    assert _forged_lines(capfd, "forged-by-orphan-same-group") == []


def test_an_orphan_in_its_own_session_forges_no_verdict(tmp_path: Path,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    result = bench("orphan_forged_verdict.py", tmp_path, static_scan=False)
    assert _forged_lines(capfd, "forged-by-orphan-setsid") == []
    if NO_EXEC:
        assert result.status is Status.CRASH and _exec_refused(result.reason), result.reason


def test_a_shell_through_an_allowed_module_is_refused(tmp_path: Path) -> None:
    result = bench("escape_collect_env.py", tmp_path, static_scan=False)
    assert "escaped-42" not in result.reason
    if NO_EXEC:
        assert result.status is Status.CRASH and _exec_refused(result.reason), result.reason


@pytest.mark.skipif(not CAPABILITIES["landlock_fs"].available,
                    reason=CAPABILITIES["landlock_fs"].detail)
def test_no_file_is_written_outside_the_work_directory(tmp_path: Path) -> None:
    escape = Path("/tmp/autokernel-escape-open-memmap.npy")  # the path the kernel file names
    escape.unlink(missing_ok=True)
    try:
        result = bench("escape_open_memmap.py", tmp_path, static_scan=False)
        assert result.status is Status.CRASH and "Permission denied" in result.reason
        assert not escape.exists()
    finally:
        escape.unlink(missing_ok=True)


def test_every_adversarial_file_has_an_expected_verdict() -> None:
    listed = {name for name, *_ in CPU_CASES} | OWN_TESTS
    assert {p.name for p in ADVERSARIAL_DIR.glob("*.py")} == listed


@pytest.mark.parametrize(
    "name,static,status,rule,stage,text", CPU_CASES,
    ids=[f"{c[0].removesuffix('.py')}{'' if c[1] else '-dynamic'}" for c in CPU_CASES],
)
def test_adversarial_and_honest_kernels(name: str, static: bool, status: Status,
                                        rule: str | None, stage: str | None, text: str,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in NAN_POISON_ONLY:
        monkeypatch.setenv(POISON_MODE_ENV, "nan")
    # On a GPU the quick sweep is the loop's screen (timed and model shapes only), and every
    # would-be keep gets the full sweep: a kernel that only odd or non-contiguous shapes expose is
    # judged here as a keep would be.
    full_sweep = HAS_CUDA and stage in ("shape_sweep", "edge_sizes")
    result = bench(name, tmp_path, static_scan=static, quick=not full_sweep)
    assert result.status is status, result.reason
    if isinstance(rule, dict):  # a race with more than one right outcome
        assert result.rule in rule and rule[result.rule] in result.reason, result.reason
    else:
        assert result.rule == rule, result.reason
    if stage is not None:
        assert result.stage == stage, result.reason
    assert text in result.reason
    assert result.passed == (status is Status.PASS)
    if status is Status.PASS:
        assert all(result.stages[s] == "pass" for s in (*STAGES, "timing"))
        assert result.latency_us is not None and result.latency_us > 0
        assert result.timing_meaningful is HAS_CUDA


def test_the_judges_hide_their_proc_entries_and_the_worker_does_not(tmp_path: Path) -> None:
    """After a bench this process (which holds the user's API keys) is non-dumpable: a
    candidate of the same non-root user cannot read its /proc/<pid>/environ. The worker itself
    stays dumpable (it reads its own /proc files)."""
    from autokernel.harness.sandbox import is_dumpable

    result = bench(starter_path("softmax"), tmp_path)
    assert result.status is Status.PASS, result.reason
    assert not is_dumpable()
    probe = tmp_path / "probe.py"
    probe.write_text(starter_path("softmax").read_text() + textwrap.dedent("""

        _starter = kernel_fn


        def kernel_fn(x):
            with open("/proc/self/status") as f:  # readable only while dumpable, for a non-root user
                f.read()
            return _starter(x)
    """))
    probed = run_bench(probe, device=DEVICE, timeout_s=TIMEOUT_S, cache_dir=tmp_path / "c2",
                       quick=True, static_scan=False)
    assert probed.status is Status.PASS, probed.reason


@pytest.mark.parametrize("edit,same", [("NUM_STAGES = 1", True), ("NUM_WARPS = 2", False)])
def test_the_launch_digest_tells_a_change_that_launches_nothing_new(
        edit: str, same: bool, tmp_path: Path) -> None:
    """The softmax starter runs its single-pass kernel at the timed shape: NUM_STAGES (read only
    by the two-pass loops) changes nothing launched there, NUM_WARPS does."""
    name = edit.split(" = ")[0]
    source = starter_path("softmax").read_text()
    edited = tmp_path / "kernel.py"
    edited.write_text("\n".join(edit if line.startswith(f"{name} = ") else line
                               for line in source.splitlines()) + "\n")
    result = bench(edited, tmp_path, incumbent=starter_path("softmax"))
    assert result.status is Status.PASS, result.reason
    assert result.launch_digest and result.incumbent_launch_digest
    assert (result.launch_digest == result.incumbent_launch_digest) is same


# -- memory: references past a share of the budget go to host memory; out of memory is a verdict

MEMORY_CAP = "AUTOKERNEL_MEMORY_CAP_BYTES"


@pytest.mark.skipif(not ON_CPU, reason="the cap is sized for the interpreter's 5x513 timed shape")
def test_a_memory_cap_moves_references_to_host_and_skips_sweep_cases_that_do_not_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 KiB: the timed 5x513 fits, the 1x32769 edge case does not (128 KiB in fp32, 64 KiB + 2
    # bytes in fp16), and a quarter of it holds only a few float64 references.
    monkeypatch.setenv(MEMORY_CAP, str(64 * 1024))
    result = bench(starter_path("softmax"), tmp_path)
    assert result.status is Status.PASS, result.reason
    notes = " | ".join(result.notes)
    assert "kept in host memory" in notes and "64.0 KiB of device memory" in notes, notes
    assert "skipped: out of memory" in notes and "N=32769" in notes, notes


def test_out_of_memory_at_a_shape_the_kernel_must_pass_is_a_crash_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_CAP, "1024")  # the smoke shape fits; the timed 5x513 does not
    result = bench(starter_path("softmax"), tmp_path)
    assert result.status is Status.CRASH and result.stage != "harness", result.reason
    assert "out of memory preparing" in result.reason and "must be judged at" in result.reason
    assert "more than the 1.0 KiB cap" in result.reason, result.reason


def test_a_kernel_that_runs_out_of_memory_gets_a_crash_with_the_figure(tmp_path: Path) -> None:
    source = (starter_path("softmax").read_text()
              + "\n\n_starter = kernel_fn\n\n\ndef kernel_fn(x):\n"
              + "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 12.00 GiB')\n")
    path = tmp_path / "kernel.py"
    path.write_text(source)
    result = bench(path, tmp_path)
    assert result.status is Status.CRASH and result.stage == "smoke", result.reason
    assert "OutOfMemoryError" in result.reason and "12.00 GiB" in result.reason


@pytest.mark.parametrize("kernel_type", ["softmax", "rmsnorm"])
def test_shipped_starters_pass_the_full_profile(kernel_type: str, tmp_path: Path) -> None:
    result = bench(starter_path(kernel_type), tmp_path, quick=False)
    assert result.status is Status.PASS, result.reason
    spec = get_spec(kernel_type)
    cpu = DEVICE == "cpu"
    sweep = spec.cpu_sweep if cpu else spec.sweep
    # A last-dim target is not swept at the (M, N, K > 1) shapes of targets over another dim.
    last_dim_sweep = [shape for shape in sweep if spec.inner(shape) == 1]
    assert result.stage_cases["shape_sweep"] >= len(last_dim_sweep) * len(spec.dtypes)
    # Per dtype: the adversarial inputs, four distributions and (NONFINITE_TYPES) NaN/inf inputs;
    # then the adversarial inputs again at the timed shape in the timed dtype, where the
    # stability shape is another one (the CPU's is the smoke shape).
    nonfinite = 1 if kernel_type in NONFINITE_TYPES else 0
    again = len(spec.adversarial) if cpu else 0
    assert result.stage_cases["stability"] == \
        (len(spec.adversarial) + 4 + nonfinite) * len(spec.dtypes) + again
    assert result.correctness_dtypes == ["fp16", "bf16", "fp32"]
    assert result.harness_seconds is not None and result.harness_seconds > 0
    assert result.eager_latency_us is not None and result.speedup_vs_eager is not None


def test_hanging_kernel_times_out_and_is_killed(tmp_path: Path) -> None:
    result = run_bench(ADVERSARIAL_DIR / "hang.py", device=DEVICE, timeout_s=12,
                       cache_dir=tmp_path, quick=True)
    assert result.status is Status.TIMEOUT
    assert "12 s" in result.reason and "killed" in result.reason
    assert result.harness_seconds is not None and result.harness_seconds < 60


def test_a_hanging_worker_dies_with_a_killed_harness(tmp_path: Path) -> None:
    """kill -9 of the process running the harness must not leave the candidate spinning."""
    script = (f"from autokernel.harness.runner import run_bench\n"
              f"run_bench({str(ADVERSARIAL_DIR / 'hang.py')!r}, device={DEVICE!r}, "
              f"timeout_s=600, cache_dir={str(tmp_path)!r}, quick=True)\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        worker = None
        deadline = time.monotonic() + 120
        while worker is None and time.monotonic() < deadline:
            time.sleep(0.5)
            worker = next((pid for pid in _children(parent.pid)), None)
        assert worker is not None, "the harness never started its worker"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the worker outlived the harness that started it"
    finally:
        parent.kill()


def _children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines()
                          if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            found.append(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_segfaulting_kernel_is_a_crash(tmp_path: Path) -> None:
    result = bench("segfault.py", tmp_path)
    assert result.status is Status.CRASH
    if DEVICE == "cpu":
        assert "SIGSEGV" in result.reason
    else:
        assert "illegal" in result.reason.lower() or "cuda" in result.reason.lower()


def test_the_candidate_sees_no_secrets_and_no_workspace(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-real")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-test-not-real")
    monkeypatch.setenv("MY_SECRET_THING", "x")
    result = bench("leaks_environment.py", tmp_path, static_scan=False)
    assert result.status is Status.CRASH
    assert "secrets=[]" in result.reason
    for forbidden in ("sk-ant", "ghp-", str(Path.cwd()), str(tmp_path)):
        assert forbidden not in result.reason
    cwd = result.reason.split("cwd=")[1].split()[0]
    home = result.reason.split("home=")[1].split()[0]
    assert "autokernel-bench-" in cwd and home.startswith(cwd)
    assert not Path(cwd).exists()  # the temporary directory is gone after the run


@pytest.mark.gpu
def test_launch_on_another_stream_is_caught_on_gpu(tmp_path: Path) -> None:
    result = bench("side_stream_generic.py", tmp_path, static_scan=False)
    assert result.status is Status.REJECTED and result.rule == "side-stream", result.reason


@pytest.mark.gpu
def test_impossible_result_is_quarantined_on_gpu(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # An honest kernel against a GPU whose "datasheet" claims 1 GB/s: its real speed is then
    # over 100% of the roofline, which the harness must refuse to believe.
    monkeypatch.setenv("AUTOKERNEL_GPU_PEAKS", "bf16_tflops=1,fp16_tflops=1,fp32_tflops=1,gbps=1")
    result = bench(starter_path("softmax"), tmp_path)
    assert result.status is Status.REJECTED and result.rule == "impossible", result.reason
    assert "impossible result" in result.reason and "quarantined" in result.reason


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_type", ["softmax", "rmsnorm"])
def test_gpu_timing_fields(kernel_type: str, tmp_path: Path) -> None:
    result = bench(starter_path(kernel_type), tmp_path, quick=False)
    assert result.status is Status.PASS, result.reason
    assert result.timing_meaningful and result.gpu
    timing = result.timings[0]
    assert timing.samples >= 20 and timing.iqr_us >= 0
    assert result.compile_latency_us is not None and result.speedup_vs_compile is not None
    assert result.pct_peak_datasheet is not None and 0 < result.pct_peak_datasheet <= 100
    assert result.peak_vram_mb is not None and result.peak_vram_mb > 0
    # A second call reuses the compiled baseline's timing from the cache.
    again = bench(starter_path(kernel_type), tmp_path, quick=True)
    assert again.status is Status.PASS and again.timings[0].compile_cached


# -- the CLI ----------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_json_is_the_last_line_and_exit_code_follows_status(tmp_path: Path) -> None:
    honest = runner.invoke(app, ["bench", str(ADVERSARIAL_DIR / "honest_softmax.py"),
                                 "--device", DEVICE, "--json", "--quick",
                                 "--cache-dir", str(tmp_path)])
    assert honest.exit_code == 0, honest.output
    data = json.loads(honest.output.strip().splitlines()[-1])
    for key in ("status", "stage", "reason", "kernel_type", "backend", "shapes", "dtypes",
                "latency_us", "iqr_us", "throughput", "pct_peak", "pct_peak_datasheet",
                "pct_peak_measured", "speedup_vs_eager", "speedup_vs_compile", "peak_vram_mb",
                "harness_seconds"):
        assert key in data
    assert data["status"] == "PASS" and data["kernel_type"] == "softmax"
    assert set(data["pct_peak"]) == {"datasheet", "measured"}

    cheat = runner.invoke(app, ["bench", str(ADVERSARIAL_DIR / "tamper_softmax.py"),
                                "--device", DEVICE, "--json"])
    assert cheat.exit_code == 1
    assert json.loads(cheat.output.strip().splitlines()[-1])["status"] == "REJECTED"


def test_cli_summary_labels_cpu_timings(tmp_path: Path) -> None:
    if DEVICE != "cpu":
        pytest.skip("the label is for the interpreter")
    done = runner.invoke(app, ["bench", str(ADVERSARIAL_DIR / "honest_softmax.py"),
                               "--device", "cpu", "--quick", "--cache-dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert "PASS" in done.output and "not meaningful" in done.output
    assert "shape_sweep" in done.output


@pytest.mark.parametrize("args,message", [
    (["bench", "does/not/exist.py"], "no such kernel file"),
    (["bench", __file__], "not a kernel file"),
    (["bench", str(ADVERSARIAL_DIR / "honest_softmax.py"), "--shapes", "12x"], "shapes"),
    (["bench", str(ADVERSARIAL_DIR / "honest_softmax.py"), "--shapes", "4x4x4x4"], "2 positive"),
    (["bench", str(ADVERSARIAL_DIR / "honest_softmax.py"), "--dtypes", "fp8"], "unknown dtype"),
])
def test_cli_bad_input_is_a_one_line_error(args: list[str], message: str) -> None:
    done = runner.invoke(app, args + ["--device", "cpu"])
    assert done.exit_code == 2
    assert message in done.output and "Traceback" not in done.output


def test_run_bench_input_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchInputError):
        run_bench(tmp_path / "missing.py", device="cpu")
    with pytest.raises(BenchInputError, match="unknown device"):
        run_bench(starter_path("softmax"), device="tpu")
    if not HAS_CUDA:
        with pytest.raises(BenchInputError, match="no CUDA GPU"):
            run_bench(starter_path("softmax"), device="cuda")
    with pytest.raises(BenchInputError, match="unknown dtype"):
        run_bench(starter_path("softmax"), device="cpu", dtypes=["fp64"])
    with pytest.raises(BenchInputError, match="positive dims"):
        run_bench(starter_path("softmax"), device="cpu", shapes=["1x2x3x4"])
    not_kernel = tmp_path / "k.py"
    not_kernel.write_text("x = 1\n")
    result = run_bench(not_kernel, device="cpu")
    assert result.status is Status.REJECTED and result.rule == "kernel-format"


# -- output comparison --------------------------------------------------------------------------

TIGHT = Tolerance(atol=0.0, rtol=1e-6)  # tighter than bf16's spacing: only the ulp rule passes
CPU = torch.device("cpu")


def _next_up(value: torch.Tensor, steps: int) -> torch.Tensor:
    bits = value.view(torch.int16) + steps
    return bits.view(value.dtype)


@pytest.mark.parametrize("reference", [1000.3, -3.0e5, 7.7e-3])
def test_bf16_one_ulp_from_a_large_reference_passes(reference: float) -> None:
    ref = torch.full((4, 8), reference, dtype=torch.float64)
    nearest = ref.to(torch.bfloat16)
    for steps in (-1, 1):
        out = _next_up(nearest.clone(), steps)
        # Far outside TIGHT's rtol: only the one-step rounding rule lets it pass.
        assert (out.double() - ref).abs().min() > TIGHT.rtol * abs(reference)
        assert (out.double() - nearest.double()).abs().max() <= ulp(ref, torch.bfloat16).max()
        assert check_output(out, ref, (4, 8), torch.bfloat16, CPU, TIGHT) is None


def test_two_ulps_off_fails_with_the_worst_index() -> None:
    ref = torch.full((3, 5), 1000.0, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    out[2, 3] = _next_up(out[2, 3].clone(), 3)
    mismatch = check_output(out, ref, (3, 5), torch.bfloat16, CPU, TIGHT)
    assert mismatch is not None and mismatch.kind == "tolerance"
    assert mismatch.worst_index == (2, 3) and mismatch.bad_elements == 1
    assert "max abs error" in mismatch.detail and "[2, 3]" in mismatch.detail


def test_registry_tolerance_applies_in_fp32() -> None:
    ref = torch.linspace(-2, 2, 64, dtype=torch.float64).reshape(8, 8)
    tol = Tolerance(atol=1e-4, rtol=1e-4)
    assert check_output(ref.float(), ref, (8, 8), torch.float32, CPU, tol) is None
    half_precision = ref.half().float()  # what an fp16 computation returns as fp32
    mismatch = check_output(half_precision, ref, (8, 8), torch.float32, CPU, tol)
    assert mismatch is not None and mismatch.kind == "tolerance"


NAN_POISON = Poison("nan", Poison.fresh().bits, 0)


def test_poison_is_reported_as_unwritten() -> None:
    ref = torch.ones(4, 4, dtype=torch.float64)
    out = torch.ones(4, 4, dtype=torch.float16)
    PoisonFiller(NAN_POISON, CPU).fill(out.view(-1)[4:8].view(torch.uint8), torch.float16)
    mismatch = check_output(out, ref, (4, 4), torch.float16, CPU, Tolerance(1e-2, 1e-2),
                            poison=NAN_POISON)
    assert mismatch is not None and mismatch.kind == "unwritten"
    assert mismatch.bad_elements == 4 and mismatch.worst_index == (1, 0)


def test_nonfinite_outputs() -> None:
    ref = torch.zeros(2, 3, dtype=torch.float64)
    out = torch.zeros(2, 3)
    out[1, 2] = float("inf")
    mismatch = check_output(out, ref, (2, 3), torch.float32, CPU, Tolerance(1, 1))
    assert mismatch is not None and mismatch.kind == "nonfinite" and "[1, 2]" in mismatch.detail
    # Where the reference itself overflows the dtype, the output must overflow the same way.
    ref = torch.tensor([1.0, 7.0e4], dtype=torch.float64)
    good = torch.tensor([1.0, float("inf")], dtype=torch.float16)
    assert check_output(good, ref, (2,), torch.float16, CPU, Tolerance(1e-2, 1e-2)) is None
    bad = torch.tensor([1.0, float("-inf")], dtype=torch.float16)
    assert check_output(bad, ref, (2,), torch.float16, CPU, Tolerance(1e-2, 1e-2)) is not None


def test_type_shape_dtype_and_device_checks() -> None:
    class Lazy(torch.Tensor):
        pass

    ref = torch.zeros(2, 2, dtype=torch.float64)
    tol = Tolerance(1e-2, 1e-2)
    lazy = torch.zeros(2, 2).as_subclass(Lazy)
    assert check_output(lazy, ref, (2, 2), torch.float32, CPU, tol).kind == "type"
    assert check_output(torch.nn.Parameter(torch.zeros(2, 2)), ref, (2, 2), torch.float32, CPU,
                        tol).kind == "type"
    assert check_output([0.0], ref, (2, 2), torch.float32, CPU, tol).kind == "type"
    assert check_output(torch.zeros(4), ref, (2, 2), torch.float32, CPU, tol).kind == "shape"
    assert check_output(torch.zeros(2, 2, dtype=torch.float16), ref, (2, 2), torch.float32, CPU,
                        tol).kind == "dtype"


def test_comparison_leaves_the_reference_intact() -> None:
    ref = torch.randn(16, dtype=torch.float64)
    kept = ref.clone()
    check_output(ref.float(), ref, (16,), torch.float32, CPU, Tolerance(1e-4, 1e-4))
    assert torch.equal(ref, kept)


def test_bitwise_equal_treats_nan_payloads_as_values() -> None:
    a = torch.tensor([float("nan"), 1.0])
    assert bitwise_equal(a, a.clone())
    assert not bitwise_equal(a, torch.tensor([float("nan"), 1.0 + 1e-7]))


# -- plausibility, statistics, side-stream tail ----------------------------------------------------

def test_calls_per_round_follow_the_shortest_contestant() -> None:
    # A 9 µs candidate beside a 120 µs eager baseline: the candidate's noise decides.
    assert calls_per_round_for([9.0, 120.0, 20.0]) == MAX_CALLS_PER_ROUND
    assert calls_per_round_for([18.5, 119.0, 60.0]) == 5
    assert calls_per_round_for([500.0, 2400.0]) == 1
    # An unmeasured contestant (0 µs: the CPU, a failed pilot) does not count as the shortest.
    assert calls_per_round_for([0.0, 500.0]) == 1
    assert calls_per_round_for([]) == MAX_CALLS_PER_ROUND


def test_impossible_result_rule() -> None:
    assert impossible_reason(10.0, 80.0, 20.0) is None
    faster_than_hardware = impossible_reason(10.0, 130.0, 20.0)
    assert faster_than_hardware is not None and "130% of the datasheet roofline" in \
        faster_than_hardware
    too_good = impossible_reason(1.0, 50.0, 12.0)
    assert too_good is not None and "12.0x faster than the best PyTorch baseline" in too_good
    assert impossible_reason(1.0, None, 9.9) is None
    assert impossible_reason(1.0, None, None) is None


def test_median_quantiles_and_iqr() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 100.0]
    assert median(values) == 3.5
    assert quantile(values, 0.25) == 2.25 and quantile(values, 0.75) == 4.75
    assert iqr(values) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_hidden_work_after_the_call_is_flagged() -> None:
    honest = SyncedCalls(wall_us=[40.0] * 9, tail_us=[8.0] * 9)
    eager = SyncedCalls(wall_us=[45.0] * 9, tail_us=[7.0] * 9)
    assert hidden_work_reason(honest, eager, 20.0) is None
    side_stream = SyncedCalls(wall_us=[40.0] * 9, tail_us=[298.0] * 9)
    reason = hidden_work_reason(side_stream, eager, 2.0)
    assert reason is not None and "another stream" in reason
    # Half the candidate's own device time is tolerated: long kernels have longer tails.
    assert hidden_work_reason(SyncedCalls([1.0], [400.0]), eager, 1000.0) is None
    assert hidden_work_reason(SyncedCalls(), SyncedCalls(), 1.0) is None  # CPU: no tails


def test_launch_cost_is_wall_time_minus_device_time() -> None:
    calls = SyncedCalls(wall_us=[50.0, 70.0, 60.0], tail_us=[5.0] * 3)
    assert calls.launch_us(45.0) == pytest.approx(15.0)
    assert calls.launch_us(80.0) == 0.0  # never negative
    assert SyncedCalls().launch_us(10.0) is None


# -- protocol, environment, caches, plan -----------------------------------------------------------

def test_report_channel_needs_one_message_with_the_nonce() -> None:
    report = WorkerReport(status="PASS", timings=[TimedShape([4, 8], "fp32", 1.0, 0.1, 20)])
    line = encode_report("n0nce", report).encode()
    assert decode_report(line, "n0nce") == report
    assert decode_report(b"", "n0nce") is None
    with pytest.raises(ChannelError):
        decode_report(line, "other")
    with pytest.raises(ChannelError):
        decode_report(line + line, "n0nce")
    with pytest.raises(ChannelError):
        decode_report(b'{"status": "PASS"}\n', "n0nce")


def test_candidate_env_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY",
                 "DB_PASSWORD", "TRITON_AUTH_TOKEN", "RANDOM_UNRELATED"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = candidate_env("cpu", tmp_path, tmp_path / "cache")
    assert not any(k in env for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GH_TOKEN",
                                      "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "TRITON_AUTH_TOKEN",
                                      "RANDOM_UNRELATED"))
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "PATH" in env
    assert env["HOME"].startswith(str(tmp_path)) and env["TMPDIR"].startswith(str(tmp_path))
    assert env["TRITON_INTERPRET"] == "1"
    # The judge's own cache, under a new name (the old one was writable from a sandbox).
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton-trusted")
    assert "TRITON_INTERPRET" not in candidate_env("cuda", tmp_path, tmp_path)


def test_baseline_cache_round_trip(tmp_path: Path) -> None:
    key = baseline_key("softmax", [4096, 4096], "fp16", "NVIDIA H100 80GB HBM3", "2.11.0",
                       {"eps": 1e-5})
    assert key == "softmax|4096x4096|fp16|NVIDIA H100 80GB HBM3|torch 2.11.0|eps=1e-05"
    assert read_baseline_cache(tmp_path) == {}
    write_baseline_cache(tmp_path, {key: {"compile_us": 21.0}})
    write_baseline_cache(tmp_path, {"other": {"compile_us": 5.0}})
    assert read_baseline_cache(tmp_path) == {key: {"compile_us": 21.0},
                                             "other": {"compile_us": 5.0}}


def test_case_plan_covers_the_five_stages() -> None:
    spec = get_spec("softmax")
    dtypes = [torch.float16, torch.bfloat16, torch.float32]
    cases = plan_cases(spec, "cpu", dtypes, [(5, 513)], [(3, 77)])
    assert {c.stage for c in cases} == set(STAGES)
    sweep = {c.shape for c in cases if c.stage == "shape_sweep"}
    # A last-dim target is checked at last-dim shapes only (axis shapes: tests/test_axis_ops.py),
    # plus a width that is a multiple of 64 up to 1024 (and, with the judge's random source,
    # shapes drawn for the job).
    documented = {s for s in spec.cpu_sweep if spec.inner(s) == 1} | {(3, 77), (5, 513)}
    extra = sweep - documented
    assert documented <= sweep and len(extra) == 1
    assert all(w % 64 == 0 and w <= 1024 for _, w in extra)
    stability = [c for c in cases if c.stage == "stability"]
    assert {c.distribution for c in stability} == {"normal", "uniform", "positive", "large"}
    assert {c.adversarial for c in stability} - {None} == {a.name for a in spec.adversarial}
    refills = [c for c in cases if c.label == "refill"]
    assert len(refills) == 3 and all(cases[c.splice_from].label == "repeat" for c in refills)
    assert {c.shape for c in cases if c.stage == "edge_sizes" and c.layout is None} == {
        s for s in spec.cpu_edge_shapes if spec.inner(s) == 1}
    assert {c.layout for c in cases if c.layout is not None} == set(LAYOUTS)
    gpu_cases = plan_cases(spec, "cuda", dtypes, [spec.bench_shapes[0]], [])
    assert {c.shape for c in gpu_cases if c.stage == "shape_sweep"} >= {
        s for s in spec.sweep if spec.inner(s) == 1}


@pytest.mark.parametrize("kernel_type", ["rmsnorm", "rotary_embedding", "matmul"])
def test_the_gpu_screen_keeps_every_stage_at_the_timed_and_model_shapes(kernel_type: str) -> None:
    spec = get_spec(kernel_type)
    timed, model = [spec.bench_shapes[0]], [spec.bench_shapes[-1]]
    full = plan_cases(spec, "cuda", [torch.float16], timed, model)
    screen = plan_cases(spec, "cuda", [torch.float16], timed, model, quick=True)
    assert {c.stage for c in screen} == set(STAGES) - {"edge_sizes"}
    assert {c.shape for c in screen} == {spec.smoke_shape, *timed, *model}
    assert {(c.stage, c.label, c.distribution, c.adversarial) for c in screen
            if c.stage in ("stability", "determinism")} == {
        (c.stage, c.label, c.distribution, c.adversarial) for c in full
        if c.stage in ("stability", "determinism")}
    assert len(screen) < len(full)
    batch = set(BATCH_LAYOUTS) if kernel_type in BATCH_LAYOUT_TYPES else set()
    assert {c.layout for c in full if c.layout is not None} == set(LAYOUTS) | batch


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_cases_hold_the_same_values_in_non_contiguous_memory(layout: str) -> None:
    from autokernel.harness.inputs import relayout

    x, w, index = torch.randn(6, 40), torch.randn(40), torch.arange(6)
    moved = relayout((x, w, index, 0.5), layout)
    # Non-contiguous, or (the offset layout) contiguous but not at its storage's start.
    assert (not moved[0].is_contiguous() or moved[0].storage_offset() > 0) \
        and torch.equal(moved[0], x)
    assert moved[1] is w and moved[2] is index and moved[3] == 0.5  # 1-D and integer: as given
    if layout == "row_strided":
        assert moved[0].stride() == (56, 1)
    elif layout == "offset":
        assert moved[0].stride() == (40, 1) and moved[0].storage_offset() == 3
    else:
        assert moved[0].stride() == (1, 6)


def test_bench_result_json_round_trip() -> None:
    result = BenchResult(status=Status.REJECTED, stage="timing", rule="impossible",
                         reason="x", notes=["n"], stage_cases={"smoke": 1})
    data = json.loads(result.to_json())
    assert data["status"] == "REJECTED" and data["pct_peak"] == {"datasheet": None,
                                                                 "measured": None}
    assert BenchResult.from_dict(data) == result



# -- the in-worker detectors on their own ----------------------------------------------------------

def test_launch_monitor_counts_skips_and_checks_compiled_kernel_launches() -> None:
    from autokernel.harness.guards import LaunchMonitor

    launched: list[tuple[object, ...]] = []

    class FakeCompiledKernel:  # the shape of triton's CompiledKernel[grid](*args, stream=None)
        def __getitem__(self, grid: tuple[int, ...]):
            def runner(*args: object, stream: object = None) -> None:
                launched.append(args)
            return runner

    class FakeJIT:  # the shape of JITFunction.run(*args, grid, warmup, **kwargs)
        def run(self, *args: object, grid: object, warmup: bool, **kwargs: object) -> str:
            launched.append(args)
            return "compiled"

    monitor = LaunchMonitor("cpu")
    monitor.wrap_getitem(FakeCompiledKernel, "fake[grid]")
    monitor.wrap_run(FakeJIT, "fake.run")
    FakeCompiledKernel()[(1,)](0)
    FakeJIT().run(0, grid=(1,), warmup=False)
    assert monitor.launches == 0 and len(launched) == 2  # disarmed: passed straight through
    launched.clear()
    monitor.armed = True
    FakeCompiledKernel()[(1,)](1, 2)
    assert FakeJIT().run(3, grid=(1,), warmup=False) == "compiled"
    FakeJIT().run(4, grid=(1,), warmup=True)  # a warm-up compiles, it does not launch
    assert monitor.launches == 2 and len(launched) == 3
    monitor.ghost = True
    FakeCompiledKernel()[(1,)](5)
    FakeJIT().run(6, grid=(1,), warmup=False)
    assert monitor.launches == 4 and len(launched) == 3  # counted, never run
    assert monitor.tampered() == []
    FakeJIT.run = lambda self, *a, **k: None
    assert monitor.tampered() == ["fake.run"]


def test_fallback_recorder_allows_layout_ops_and_flags_compute() -> None:
    from autokernel.harness.guards import FallbackRecorder, LaunchMonitor

    recorder = FallbackRecorder(LaunchMonitor("cpu"), torch.device("cpu"))
    recorder.filler = PoisonFiller(NAN_POISON, torch.device("cpu"))
    x = torch.randn(4, 6)
    with recorder:
        y = torch.empty_like(x)
        x.t().contiguous().view(-1).to(torch.float16)
        torch.zeros(3).fill_(1.0)
        y.copy_(x)
    assert recorder.violations == []
    with recorder:
        fresh = torch.empty(8)
        x.sum()
        x.to("meta")
    assert bits_all_poison(fresh)
    assert any(v.startswith("sum") for v in recorder.violations)
    assert any("device transfer" in v for v in recorder.violations)


def bits_all_poison(t: torch.Tensor) -> bool:
    marks = NAN_POISON.marks(t)
    return marks is not None and bool(marks.all())


def test_identity_snapshot_sees_replacement_deletion_and_shadowing() -> None:
    import types

    from autokernel.harness.guards import IdentitySnapshot

    module = types.ModuleType("fake_torch")
    module.softmax = lambda x: x
    module.flag = True  # data, not a function: free to change

    class Tensor:
        def add(self) -> None: ...

    class SubTensor(Tensor):
        pass

    snapshot = IdentitySnapshot.take({"fake_torch": module, "SubTensor": SubTensor})
    module.flag = False
    assert snapshot.changes() == []
    module.softmax = lambda x: 0 * x
    SubTensor.add = lambda self: None  # shadows the inherited method
    assert set(snapshot.changes()) == {"fake_torch.softmax replaced", "SubTensor.add added"}
    del module.softmax
    assert "fake_torch.softmax deleted" in snapshot.changes()


def test_stream_watch_ignores_wrapping_an_existing_stream() -> None:
    # torch.cuda.current_stream() and Event.record() build Stream objects with stream_id=...:
    # honest code (and Triton's do_bench inside an autotuner) does that all the time.
    from autokernel.harness.guards import LaunchMonitor

    monitor = LaunchMonitor("cpu")
    original_new = torch.cuda.Stream.__dict__["__new__"]
    original_set = torch.cuda.set_stream
    try:
        monitor._watch_streams()
        monitor.armed = True
        for kwargs in ({"stream_id": 0, "device_index": 0, "device_type": 1}, {}):
            try:
                torch.cuda.Stream(**kwargs)
            except (RuntimeError, AssertionError):
                pass  # no CUDA here: construction fails after the watch has seen it
        assert monitor.stream_violations == ["kernel_fn created a CUDA stream"]
    finally:
        torch.cuda.Stream.__new__ = original_new
        torch.cuda.set_stream = original_set
