"""The judge on a GPU (issue 26): CUDA IPC through dedicated allocations, and the red team there.

All marked gpu: they skip cleanly without one.

- Two processes on one GPU: the judge shares an input in a dedicated allocation (`dedicated`) and
  holds a reference and other tensors in torch's caching allocator; the candidate process maps
  the input, reads and overwrites everything its mapping reaches, and hands back an output of its
  own. The judge's reference and other tensors must be untouched and unseen, and only its own
  input (which the candidate may see) and the candidate's output cross.
- The red team's device-independent attacks on the GPU, each with the verdict it gets on the CPU.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from autokernel.harness import channel
from autokernel.harness import runner
from autokernel.harness.dedicated import BASE_ALIGN_BYTES, share_like
from autokernel.harness.result import Status
from autokernel.harness.runner import run_bench

pytestmark = pytest.mark.gpu
RED_TEAM = Path(__file__).parent / "adversarial" / "judge"
MARK = 1234.5  # the judge's secret values: the candidate must never see one

# The candidate's side: map the judge's input, read its whole mapping (every byte the handle
# opened), report whether the judge's mark is anywhere in it, overwrite all of it, and return an
# output of its own.
CANDIDATE = textwrap.dedent('''
    import socket, sys
    import torch
    from autokernel.harness import channel

    sock = socket.socket(fileno=int(sys.argv[1]))
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    opened = []
    message = channel.receive(sock, device, channel.CANDIDATE_ACCEPTS, opened)
    x = message["inputs"][0]
    whole = opened[0].tensor(torch.float32, [opened[0].nbytes // 4], [1], 0)
    seen = bool((whole == float(sys.argv[2])).any())
    out = x * 2 + 1
    whole.fill_(-7.0)  # everything the mapping reaches
    torch.cuda.synchronize()
    channel.send(sock, {"out": out, "seen": seen, "mapped": opened[0].nbytes})
    channel.receive(sock, device, channel.CANDIDATE_ACCEPTS)
    del x, whole
    opened[0].close()
''')


@pytest.fixture(scope="module")
def judge_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The judge's own cache (its compiled-stock baselines), shared by this module's runs as a
    night's experiments share it: each run would otherwise compile and time every baseline
    again. Each candidate process still gets a private, fresh cache of its own."""
    return tmp_path_factory.mktemp("judge-cache")


def _gpu() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda", 0)


def test_a_candidate_reaches_only_its_own_inputs_through_cuda_ipc() -> None:
    device = _gpu()
    # The judge's secrets sit in the caching allocator right beside where an input would be.
    reference = torch.full((4096,), MARK, device=device)
    neighbour = torch.full((256,), MARK, device=device)
    x = torch.arange(1024, dtype=torch.float32, device=device)
    buffer, shared_x = share_like(x)
    torch.cuda.synchronize()
    ours, theirs = socket.socketpair()
    peer = subprocess.Popen([sys.executable, "-c", CANDIDATE, str(theirs.fileno()), str(MARK)],
                            pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        channel.send(ours, {"inputs": [channel.Shared(buffer, shared_x)]}, cuda_ipc=False)
        reply = channel.receive(ours, device, channel.JUDGE_ACCEPTS)
        assert reply["seen"] is False  # nothing of the judge's in what the handle maps
        assert reply["mapped"] == buffer.nbytes  # one dedicated allocation, nothing more
        assert torch.equal(reply["out"], x * 2 + 1)  # its output crosses
        torch.cuda.synchronize()
        assert bool((reference == MARK).all()) and bool((neighbour == MARK).all())
        assert bool((shared_x == -7.0).all())  # it could write its own input, no more
        del reply
        channel.send(ours, {"op": "done"}, cuda_ipc=False)
        assert peer.wait(60) == 0
    finally:
        peer.kill()
        ours.close()
        buffer.free()


def test_the_judge_never_sends_a_caching_allocator_tensor() -> None:
    device = _gpu()
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="dedicated allocation"):
            channel.send(ours, {"t": torch.ones(4, device=device)}, cuda_ipc=False)
    finally:
        ours.close()
        theirs.close()


# (file, status, rule, text in the reason), each judged with the scan off on the quick sweep
GPU_CASES = [
    ("forged_verdict_frame.py", Status.CRASH, None, "out of order"),
    ("forged_violation_pass.py", Status.CRASH, None, "only the judge decides"),
    ("zeros_while_timed.py", Status.FAIL, "replay", "produced while timing is wrong"),
    ("counter_in_default.py", Status.REJECTED, "call-time-state", "defaults changed"),
    ("counter_in_closure.py", Status.REJECTED, "call-time-state", "closure 'calls' changed"),
    ("raw_thread_late_zero.py", Status.REJECTED, "thread", "still running"),
    ("tell_thread_count.py", Status.FAIL, None, "outside atol"),
    ("softmax_drops_small.py", Status.FAIL, None, "row rule"),
    ("tell_poison_pattern.py", Status.FAIL, None, ""),
    ("forged_terminal_text.py", Status.CRASH, None, "RuntimeError"),
    ("honest_softmax_control.py", Status.PASS, None, ""),
    ("honest_factory_closure.py", Status.PASS, None, ""),
]


@pytest.mark.parametrize("name,status,rule,text", GPU_CASES,
                         ids=[c[0].removesuffix(".py") for c in GPU_CASES])
def test_red_team_on_the_gpu(name: str, status: Status, rule: str | None, text: str,
                             judge_cache: Path) -> None:
    _gpu()
    result = run_bench(RED_TEAM / name, device="cuda", quick=True, static_scan=False,
                       cache_dir=judge_cache, timeout_s=600)
    assert result.status is status, result.reason
    assert rule is None or result.rule == rule, result.reason
    assert text in result.reason, result.reason


def test_forged_device_times_leave_no_forged_figure_on_the_gpu(judge_cache: Path) -> None:
    """forged_device_times.py burns 20 ms of host time per timed call and rewrites a list of
    times it looks for on its caller's frame. On the CPU the judge's clock contradicts it (a FAIL,
    tests/test_redteam_judge.py). On a GPU the candidate process's batch keeps no such list while
    a call runs, so nothing is rewritten: the host falls behind the GPU and the events see the
    idle device. Either verdict is sound; what must never happen is a figure below the 20 ms."""
    _gpu()
    result = run_bench(RED_TEAM / "forged_device_times.py", device="cuda", quick=True,
                       static_scan=False, cache_dir=judge_cache, timeout_s=600)
    if result.status is Status.PASS:
        assert all(t.latency_us >= 10_000 for t in result.timings), result.timings
    else:
        assert result.status is Status.FAIL and result.rule == "timing-contradiction", \
            result.reason


# Every attack of red teams 3 and 4 on the GPU, through the full harness as the loop runs it:
# none may PASS. The CPU tests name each one's stage and reason on the interpreter's plan (most
# skip on a GPU); this one only asks the verdict. The scan is on only for attacks whose defence
# is the scan (an escape, or a tell read through one); every other attack is judged with it off.
CONTROLS = {"honest_softmax_control.py", "honest_factory_closure.py",  # PASS, tests above
            "sabotage_incumbent.py", "incumbent_slows_challenger.py"}
SCAN_DEFENDED = {"escape_match_globals.py", "escape_self_parameter.py", "escape_enum_builtins.py",
                 "escape_pkgutil_resolve.py", "escape_typing_extensions_io.py",
                 "escape_coding_utf7.py", "rt4_extra_modules_tell.py",
                 "rt4_pathlib_landlock_tell.py", "rt4_xpu_ctypes_host_softmax.py"}
ATTACKS = sorted(p.name for p in RED_TEAM.glob("*.py") if p.name not in CONTROLS)


def test_the_gpu_sweep_names_real_files() -> None:
    assert CONTROLS | SCAN_DEFENDED <= {p.name for p in RED_TEAM.glob("*.py")}
    assert len(ATTACKS) >= 50


# An attack on one kind of target is judged as that target (the CPU tests do the same).
TARGET_OPTIONS: dict[str, dict[str, Any]] = {
    "rt4_softmax_axis_outer_stride.py": {"shapes": [(2, 40, 5)], "params": {"axis": 1}},
}


@pytest.mark.parametrize("name", ATTACKS, ids=[a.removesuffix(".py") for a in ATTACKS])
def test_no_attack_passes_the_full_harness_on_the_gpu(name: str, judge_cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu()
    if name == "write_quota.py":  # it writes a few MiB: under the default quota that is allowed
        monkeypatch.setattr(runner, "WRITE_QUOTA_BYTES", 2 * 2**20)
    result = run_bench(RED_TEAM / name, device="cuda", static_scan=name in SCAN_DEFENDED,
                       cache_dir=judge_cache, timeout_s=300, **TARGET_OPTIONS.get(name, {}))
    if name == "plant_triton_cache.py":
        # Its kernel is right; the cheat is the file it plants, which must not survive the run
        planted = [p for p in judge_cache.rglob("*") if p.is_file()
                   and b"planted-by-redteam" in p.read_bytes()]
        assert planted == [], (result.status, planted)
        return
    assert result.status is not Status.PASS, (result.timings, result.notes)


def test_a_shared_input_begins_at_the_base_the_judge_drew() -> None:
    device = _gpu()
    x = torch.randn(3, 5, device=device)[:, 1:]  # a storage offset of its own
    base = 7 * BASE_ALIGN_BYTES
    buffer, shared = share_like(x, base)
    assert torch.equal(shared, x) and shared.storage_offset() == x.storage_offset()
    assert shared.untyped_storage().data_ptr() == buffer.pointer + base
    assert channel.Shared(buffer, shared).base_bytes == base
    del shared
    torch.cuda.synchronize()
    buffer.free()


@pytest.mark.parametrize("challenger,incumbent", [
    ("sabotage_incumbent.py", "honest_softmax_control.py"),
    ("honest_softmax_control.py", "incumbent_slows_challenger.py"),
])
def test_incumbent_and_challenger_cannot_reach_each_other_on_the_gpu(
        challenger: str, incumbent: str, judge_cache: Path) -> None:
    _gpu()
    result = run_bench(RED_TEAM / challenger, device="cuda", quick=True, static_scan=False,
                       cache_dir=judge_cache, timeout_s=600,
                       incumbent=RED_TEAM / incumbent)
    assert result.status is Status.PASS, result.reason
    timing = result.timings[0]
    assert timing.incumbent_us is not None, result.notes
    # The attacker's side scans sys.modules on every call (host time the GPU waits for: its own
    # figure is slow, rightly). The honest side must time as it does alone, not sabotaged.
    alone = run_bench(RED_TEAM / "honest_softmax_control.py", device="cuda", quick=True,
                      static_scan=False, cache_dir=judge_cache, timeout_s=600).timings[0]
    honest = timing.latency_us if challenger.startswith("honest") else timing.incumbent_us
    assert honest < 2 * alone.latency_us, (timing, alone)
