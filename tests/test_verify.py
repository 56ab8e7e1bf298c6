"""`autokernel verify` on a real finished run, `autokernel.load(DIR).patch(model)`, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import DEVICE
from finished_run import (  # noqa: F401 - fixtures
    EXPECTED_CALLS,
    DEFERRED_ADDS,
    FUNCTIONAL,
    REPO,
    TINY_LLAMA,
    autokernel,
    made_run,
    one_line_error,
    run_dir,
    unfinish,
)

from fabricated_run import fabricate_run

import autokernel as autokernel_package
from autokernel.integrate import verify as verify_module
from autokernel.integrate.patch import _outermost
from autokernel.integrate.loader import RunError, open_run
from autokernel.integrate.verify import (
    VerifyOptions,
    amdahl_check,
    combined_amdahl,
    end_to_end_lines,
    verify_run,
)
from autokernel.profiling.model_loader import load_model_file, run_forward

FIXTURES = REPO / "tests" / "fixtures" / "models"


def plan_sites(run: Path, kernel_type: str) -> set[str]:
    plan = json.loads((run / "plan.json").read_text())
    return {site["module"] for target in plan["targets"] if target["kernel_type"] == kernel_type
            for site in target["call_sites"]}


def test_verify_splices_every_finished_kernel_and_matches_the_model(run_dir: Path) -> None:
    done = autokernel("verify", str(run_dir), "--device", "cpu", "--iters", "2")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads((run_dir / "verify.json").read_text())

    accuracy = result["accuracy"]
    assert accuracy["passed"] and accuracy["oracle"] == "fp64"
    assert accuracy["error_patched"] <= accuracy["bound"] < 1e-5  # fp32: near exact
    rows = {row["kernel_type"]: row for row in result["kernels"]}
    assert set(rows) == set(EXPECTED_CALLS)
    for kernel_type, count in EXPECTED_CALLS.items():
        row = rows[kernel_type]
        assert row["calls_per_forward"] == count and not row["fallbacks"]
        if kernel_type in DEFERRED_ADDS:
            assert row["scopes"] == _outermost(plan_sites(run_dir, kernel_type))
            continue
        routed = row["scopes"] if kernel_type in FUNCTIONAL else row["modules"]
        assert set(routed) == plan_sites(run_dir, kernel_type)  # where the profiler found them
    assert {t: row["backward"] for t, row in rows.items()} == {
        "matmul": "analytic", "fused_mlp": "recompute", "flash_attention": "recompute",
        "rotary_embedding": "analytic", "add_rmsnorm": "recompute"}
    assert result["routed_calls_per_forward"] == sum(EXPECTED_CALLS.values())
    # On the CPU, in-context selection times no kernel against all of them and routes every
    # kernel (the interpreter's timings say nothing); the delivery is patched eager, checked.
    assert result["selection"] == {"eager": sorted(row["tag"] for row in result["kernels"])}
    assert {row["decision"] for row in result["ablation"]} == {"in"}
    assert all("CPU" in row["reason"] for row in result["ablation"])
    assert not result["ablations"]["eager"]["judged"] and "compile" not in result["ablations"]
    delivery = result["delivery"]
    assert delivery["mode"] == "eager" and delivery["kernels"] == result["selection"]["eager"]
    assert delivery["accuracy"]["passed"]
    assert all(row["selected"] == {"eager": True} for row in result["kernels"])
    assert result["gradients"]["checked"] and result["gradients"]["passed"]

    timing = result["timing"]
    assert result["schema"] == 2 and timing["meaningful"] is False
    assert timing["device"]["method"] == "host-clock" and "cpu" in timing["device"]["protocol"]
    assert "synchronized forward" in timing["wall"]["protocol"]
    for which in ("device", "wall"):  # both figures, each with its own speedups
        contestants = timing[which]["contestants"]
        assert set(contestants) == {"eager", "patched"}  # compile is off by default on cpu
        assert all(t["samples"] == 2 for t in contestants.values())
        eager, patched = contestants["eager"], contestants["patched"]
        assert result["speedup"][which]["vs_eager"] == pytest.approx(eager["median_us"]
                                                                     / patched["median_us"])
    assert result["amdahl"]["measured_vs_eager"] == result["speedup"]["device"]["vs_eager"]
    amdahl = result["amdahl"]
    parts = [(p["share"], p["kernel_speedup"]) for p in amdahl["parts"]]
    assert amdahl["estimate_vs_eager"] == pytest.approx(combined_amdahl(parts))
    assert {p["tag"] for p in amdahl["parts"]} == {row["tag"] for row in result["kernels"]}
    assert amdahl["agrees"] is None and "not compared" in amdahl["message"]  # cpu timings
    assert {p["tag"] for p in result["host"]["parts"]} <= {row["tag"] for row in result["kernels"]}
    for text in ("Amdahl estimate", "vs eager", "PASS", "verify.json"):
        assert text in done.stdout


def test_amdahl_estimate_and_its_agreement_with_the_measurement() -> None:
    parts = [{"tag": "01_matmul", "share": 0.5, "kernel_speedup": 2.0},
             {"tag": "02_rmsnorm", "share": 0.1, "kernel_speedup": 4.0}]
    estimate = 1 / (0.4 + 0.25 + 0.025)
    close = amdahl_check(parts, estimate * 1.02, noise=0.03, meaningful=True)
    assert close["estimate_vs_eager"] == pytest.approx(estimate) and close["agrees"] is True
    far = amdahl_check(parts, estimate * 0.9, noise=0.03, meaningful=True)
    assert far["agrees"] is False and "-10.0%" in far["message"] and "noise (±3.0%)" in \
        far["message"]
    assert amdahl_check(parts, estimate, 0.01, meaningful=False)["agrees"] is None
    assert amdahl_check([], 1.2, 0.01, meaningful=True)["estimate_vs_eager"] is None


def test_host_launch_cost_of_the_routed_calls_is_its_own_figure() -> None:
    from types import SimpleNamespace

    from autokernel.integrate.verify import host_cost, host_cost_line

    targets = [SimpleNamespace(tag="03_layernorm", best_result={"launch_us": 58.2,
                                                                "eager_launch_us": 30.9}),
               SimpleNamespace(tag="04_softmax", best_result={"launch_us": None}),
               SimpleNamespace(tag="05_matmul", best_result=None)]
    run = SimpleNamespace(state=SimpleNamespace(targets=targets))
    rows = [{"tag": "03_layernorm", "calls_per_forward": 5},
            {"tag": "04_softmax", "calls_per_forward": 2},
            {"tag": "05_matmul", "calls_per_forward": 0}]
    host = host_cost(run, rows)  # type: ignore[arg-type]
    assert host["added_us_per_forward"] == pytest.approx(5 * (58.2 - 30.9))
    assert [p["tag"] for p in host["parts"]] == ["03_layernorm"]  # no figure: left out, not 0
    line = host_cost_line(host)
    assert line is not None and "+136.5 µs per forward" in line and "5 × (58.2 − 30.9)" in line
    assert host_cost_line(host_cost(run, rows[1:])) is None  # type: ignore[arg-type]


def _figures(eager: float, compiled: float, patched: float, patched_compiled: float,
             iqr: float = 1.0) -> dict:
    return {name: {"median_us": us, "iqr_us": iqr, "samples": 20}
            for name, us in (("eager", eager), ("compile", compiled), ("patched", patched),
                             ("patched_compile", patched_compiled))}


def _schema2_result() -> dict:
    """The H100's 03_softmax_wide in verify.json's schema 2: kernels as fast as eager's on the
    device, the forward host-bound, the routed call costing launch time."""
    device = _figures(20.4, 26.5, 20.0, 26.4, iqr=0.2)
    wall = _figures(60.3, 268.8, 184.7, 283.6, iqr=18.6)
    timing = {"meaningful": True, "errors": {}, "under_compile": "inductor",
              "device": {"method": "cuda-graph", "protocol": "...", "rounds": 40,
                         "contestants": device, "notes": []},
              "wall": {"protocol": "...", "rounds": 60, "contestants": wall}}
    speedup = {"device": verify_module.speedups(device), "wall": verify_module.speedups(wall)}
    parts = [{"tag": "01_softmax", "share": 0.9, "kernel_speedup": 1.02}]
    return {"schema": 2, "timing": timing, "speedup": speedup,
            "amdahl": amdahl_check(parts, speedup["device"]["vs_eager"],
                                   speedup["device"]["noise"], True),
            "host": {"added_us_per_forward": 22.4, "parts": [
                {"tag": "01_softmax", "calls": 1, "launch_us": 40.8, "eager_launch_us": 18.4,
                 "added_us": 22.4}]}}


def test_end_to_end_lines_print_device_and_wall_figures_each_once_and_labelled() -> None:
    result = _schema2_result()
    lines = end_to_end_lines(result)
    text = "\n".join(lines)
    device, wall = result["speedup"]["device"], result["speedup"]["wall"]
    for figure in (f"{device['vs_eager']:.3f}× vs eager", f"{device['vs_compile']:.3f}×",
                   f"{wall['vs_eager']:.3f}× vs eager", f"{wall['vs_compile']:.3f}×",
                   "20.4 µs", "60.3 µs", "184.7 µs", "20.0 µs",
                   f"{result['amdahl']['estimate_vs_eager']:.3f}×", "+22.4 µs"):
        assert text.count(figure) == 1, (figure, text)
    device_line = next(line for line in lines if line.startswith("end to end, device time"))
    wall_line = next(line for line in lines if line.startswith("wall time per synchronized"))
    assert f"{device['vs_eager']:.3f}× vs eager" in device_line and "CUDA-graph" in device_line
    assert f"{wall['vs_eager']:.3f}× vs eager" in wall_line
    assert "host-bound here" in wall_line and "34%" in wall_line  # 20.4 of 60.3 µs
    header = next(line for line in lines if "device time per forward" in line)
    assert "wall time per synchronized forward" in header
    assert result["amdahl"]["agrees"] is True  # the device figure, not the wall one


def test_a_verify_json_from_before_device_times_is_still_read() -> None:
    """Schema 1: only the wall figure, at timing.contestants and flat in speedup."""
    from autokernel.integrate.end_to_end import figure, speedup_figure

    wall = _figures(60.3, 268.8, 184.7, 283.6)
    old = {"timing": {"rounds": 60, "meaningful": True, "protocol": "wall time ...",
                      "contestants": wall, "errors": {}, "under_compile": "inductor"},
           "speedup": verify_module.speedups(wall),
           "amdahl": {"estimate_vs_eager": 1.01, "message": "measured 0.326× differs ..."}}
    assert figure(old, "device") is None and speedup_figure(old, "device") == {}
    assert figure(old, "wall")["contestants"] == wall
    assert speedup_figure(old, "wall")["vs_eager"] == pytest.approx(60.3 / 184.7)
    text = "\n".join(end_to_end_lines(old))
    assert "device time: not measured" in text
    assert text.count(f"{60.3 / 184.7:.3f}× vs eager") == 1  # on the wall line
    assert "60.3 µs" in text and "wall time per synchronized forward" in text


@pytest.mark.gpu
def test_device_time_of_a_host_bound_forward_is_not_its_launch_cost() -> None:
    """A patched model whose kernel is eager's own softmax, with 200 µs of host work per routed
    call: the wall time per synchronized forward shows the host cost, the device time does not."""
    import time

    from torch import nn

    from autokernel.integrate.custom_ops import KernelOp
    from autokernel.integrate.end_to_end import speedups, time_device, time_wall
    from autokernel.integrate.patch import patch_model
    from autokernel.integrate.routing import RoutedKernel
    from autokernel.ops.softmax import INTEGRATION

    class Softmax(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x, dim=-1)

    def slow_host_softmax(x: torch.Tensor) -> torch.Tensor:
        until = time.perf_counter() + 200e-6
        while time.perf_counter() < until:
            pass
        return torch.softmax(x, dim=-1)

    op = KernelOp("softmax", "autokernel::same_as_eager", slow_host_softmax, "analytic", "cuda",
                  slow_host_softmax, INTEGRATION)
    kernel = RoutedKernel(tag="01_softmax", kernel_type="softmax", op=op, reference=None,
                          dtypes=frozenset({torch.float16}))
    eager, patched = Softmax(), Softmax()
    patch = patch_model(patched, [kernel])
    x = torch.randn(64, 4096, device="cuda", dtype=torch.float16)
    contestants = {"eager": lambda: eager(x), "patched": lambda: patched(x)}
    device = torch.device("cuda")
    with torch.no_grad():
        for fn in contestants.values():
            fn()
        patch.report.reset_counts()
        device_figure = time_device(contestants, device, 30, 5.0)
        wall_figure = time_wall(contestants, device, 30, 5.0)
    assert patch.report.calls > 0  # the kernel was routed
    assert device_figure["method"] == "cuda-graph"
    on_device = speedups(device_figure["contestants"])["vs_eager"]
    on_wall = speedups(wall_figure["contestants"])["vs_eager"]
    assert on_device == pytest.approx(1.0, abs=0.1), device_figure
    assert on_wall < 0.5, wall_figure  # 200 µs of host time against a few-µs forward


def test_verify_fails_when_a_kernel_is_wrong_inside_the_model(run_dir: Path) -> None:
    state = json.loads((run_dir / "state.json").read_text())
    norm = next(t for t in state["targets"] if t["kernel_type"] == "add_rmsnorm")
    kernel = run_dir / norm["kernel_file"]
    # 0.1% off: well inside the harness's fp16 tolerance, far outside the fp32 model's error.
    kernel.write_text(kernel.read_text() + "\n\n_exact = kernel_fn\n\n\n"
                      "def kernel_fn(x, residual, weight, eps=1e-6):\n"
                      "    y, h = _exact(x, residual, weight, eps)\n"
                      "    return y * 1.001, h\n")
    done = autokernel("verify", str(run_dir), "--device", "cpu", "--iters", "1",
                      "--no-gradients")
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads((run_dir / "verify.json").read_text())
    assert not result["passed"] and not result["accuracy"]["passed"]
    assert result["accuracy"]["error_patched"] > 100 * result["accuracy"]["error_original"]
    assert "FAIL" in done.stdout


def test_verify_times_torch_compile_of_the_original_and_the_patched_model(run_dir: Path) -> None:
    backend = "aot_eager" if DEVICE == "cpu" else "inductor"  # inductor's CPU build is slow
    result = verify_run(open_run(run_dir), VerifyOptions(
        device=DEVICE, iters=1, compile=True, gradients=False, compile_backend=backend))
    assert result["timing"]["errors"] == {}
    assert set(result["timing"]["compile_seconds"]) >= {"compile none"}
    for which in ("device", "wall"):
        contestants = result["timing"][which]["contestants"]
        assert set(contestants) == {"eager", "compile", "patched", "patched_compile"}
        speedup = result["speedup"][which]
        assert speedup["vs_compile"] == pytest.approx(contestants["compile"]["median_us"]
                                                      / contestants["patched"]["median_us"])
        assert "patched_compile_vs_compile" in speedup
    assert result["accuracy"]["passed"]
    # Under torch.compile every kernel of a configuration goes into the graph; the compile
    # ablation chose them (every one on the CPU), and verify says so, once per mode.
    assert result["timing"]["under_compile"] == "kernels"
    assert set(result["selection"]) == {"eager", "compile"}
    lines = end_to_end_lines(result)
    assert sum(line.startswith("in-context selection, compile") for line in lines) == 1
    if DEVICE == "cpu":
        assert result["selection"]["compile"] == sorted(r["tag"] for r in result["kernels"])


def test_load_patches_a_model_from_python(run_dir: Path) -> None:
    kernels = autokernel_package.load(run_dir, device=DEVICE)
    assert sorted(k.kernel_type for k in kernels.kernels) == sorted(EXPECTED_CALLS)
    loaded = load_model_file(TINY_LLAMA, dtype="fp32", device=DEVICE)
    expected = run_forward(loaded)
    patch = kernels.patch(loaded.model)
    routed = run_forward(loaded)
    torch.testing.assert_close(routed, expected, atol=1e-5, rtol=1e-5)
    assert patch.report.calls == sum(EXPECTED_CALLS.values())
    assert all(" routed" in line for line in patch.report.lines())
    patch.unpatch()


def test_kernels_are_used_only_in_the_dtype_the_harness_verified(run_dir: Path) -> None:
    """The run checked its kernels in fp32 only (no --check-all-dtypes): a bf16 model keeps
    PyTorch for every call, and says why."""
    kernels = autokernel_package.load(run_dir, device=DEVICE)
    assert all(k.dtypes == frozenset({torch.float32}) for k in kernels.kernels)
    loaded = load_model_file(TINY_LLAMA, dtype="bf16", device=DEVICE)
    expected = run_forward(loaded)
    patch = kernels.patch(loaded.model)
    assert torch.equal(run_forward(loaded), expected)
    assert patch.report.calls == 0
    for stats in patch.report.kernels.values():
        assert stats.fallbacks == {"dtype bfloat16 not verified": EXPECTED_CALLS[
            stats.kernel_type]}


def test_kernels_slower_than_pytorch_are_left_out_on_a_gpu_run(run_dir: Path) -> None:
    run = open_run(run_dir)
    finished = run.finished_targets()
    assert len(finished) >= 2
    assert run.require_finished() == finished, "cpu timings mean nothing: every kernel counts"
    run.info.setdefault("config", {})["device"] = "cuda"
    for target, speedup in zip(finished, [0.8] + [1.5] * (len(finished) - 1)):
        target.best.speedup_vs_eager = speedup
    assert [t.tag for t in run.require_finished()] == [t.tag for t in finished[1:]]
    everything = open_run(run_dir, include_slower=True)
    everything.info.setdefault("config", {})["device"] = "cuda"
    assert len(everything.require_finished()) == len(finished)
    for target in finished:
        target.best.speedup_vs_eager = 0.9
    with pytest.raises(RunError, match="--all-kernels"):
        run.require_finished()


def test_verify_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    line = one_line_error(autokernel("verify", str(tmp_path), "--device", "cpu"))
    assert "is not an autokernel run" in line


def test_verify_refuses_a_run_with_no_finished_target(run_dir: Path) -> None:
    unfinish(run_dir)
    line = one_line_error(autokernel("verify", str(run_dir), "--device", "cpu"))
    assert "no finished target" in line and "autokernel resume" in line


def test_verify_refuses_a_run_whose_model_no_longer_loads(run_dir: Path) -> None:
    model_copy = next((run_dir / "model").glob("*.py"))
    model_copy.write_text("class Model(:\n")
    line = one_line_error(autokernel("verify", str(run_dir), "--device", "cpu"))
    assert "no longer loads" in line and "syntax error" in line


def test_verify_refuses_a_run_whose_kernel_no_longer_loads(run_dir: Path) -> None:
    kernel = next((run_dir / "kernels").glob("*rmsnorm.py"))
    kernel.write_text(kernel.read_text() + "\nimport a_module_that_does_not_exist\n")
    line = one_line_error(autokernel("verify", str(run_dir), "--device", "cpu"))
    assert "does not load" in line and "a_module_that_does_not_exist" in line


def test_verify_refuses_zero_iterations(run_dir: Path) -> None:
    assert "--iters" in one_line_error(autokernel("verify", str(run_dir), "--iters", "0"))


@pytest.mark.gpu
def test_verify_on_the_gpu_with_inductor(run_dir: Path) -> None:
    """The kernels compiled for the GPU, in eager and inside an Inductor graph, timed with CUDA
    events (the run itself was tuned on the CPU, so its speedups are not the point here)."""
    done = autokernel("verify", str(run_dir), "--device", "cuda", "--compile", "--budget", "5")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads((run_dir / "verify.json").read_text())
    assert result["gpu"] and result["timing"]["meaningful"] is True
    assert result["timing"]["errors"] == {}
    assert result["timing"]["device"]["method"] in ("cuda-graph", "queued-forward")
    for which in ("device", "wall"):
        contestants = result["timing"][which]["contestants"]
        assert set(contestants) == {"eager", "compile", "patched", "patched_compile"}
        assert all(t["samples"] >= 20 for t in contestants.values())
    assert result["accuracy"]["passed"] and result["gradients"]["passed"]
    assert result["routed_calls_per_forward"] == sum(EXPECTED_CALLS.values())
    # In-context selection judged every kernel in both modes, and the delivery is the fastest
    # of the deliveries timed, plain torch.compile and reduce-overhead among them.
    modes = {"eager", "cuda-graph", "compile", "reduce-overhead"}
    assert set(result["selection"]) == modes
    assert {(r["kernel"], r["mode"]) for r in result["ablation"]} == {
        (row["tag"], mode) for row in result["kernels"] for mode in modes}
    modes = {row["delivery"]["mode"] for row in result["deliveries"]}
    assert {"eager", "compile", "reduce-overhead", "cuda-graph"} <= modes
    fastest = min(row["wall"]["median_us"] for row in result["deliveries"])
    delivered = result["delivery"]
    chosen = next(row for row in result["deliveries"] if row["delivery"] == {
        "mode": delivered["mode"], "kernels": delivered["kernels"]})
    assert chosen["wall"]["median_us"] == fastest and delivered["accuracy"]["passed"]


def test_verify_says_when_a_finished_kernel_is_not_used_by_the_model(tmp_path: Path) -> None:
    """log_softmax + nll_loss is a cross_entropy target for the profiler, but no single call the
    router could send to the kernel: verify must say so, not report a silent 0."""
    model = REPO / "tests" / "fixtures" / "models" / "log_softmax_nll.py"
    # A run whose target finished with its starter (the kernel the loop would have kept first)
    run, plan = fabricate_run(model, tmp_path / "run")
    assert [t.kernel_type for t in plan.targets] == ["cross_entropy"]
    done = autokernel("verify", str(run), "--device", "cpu", "--iters", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((run / "verify.json").read_text())
    (row,) = result["kernels"]
    assert row["kernel_type"] == "cross_entropy" and row["calls_per_forward"] == 0
    assert "is not used by the model's forward" in done.stdout
    assert result["amdahl"]["estimate_vs_eager"] is None
    assert "no kernel was routed" in result["amdahl"]["message"]
    assert result["accuracy"]["passed"] and result["accuracy"]["difference"] == 0


# ---------------------------------------------------------------------------------------------
# Models autokernel had not seen: fabricated runs (a CPU plan, the starters as the kernels)


def routed(result: dict) -> dict[str, dict]:
    """verify.json's kernel rows by target label: "matmul (linear)", "softmax"..."""
    return {(f"{r['kernel_type']} ({r['role']})" if r["role"] else r["kernel_type"]): r
            for r in result["kernels"]}


def test_verify_splices_into_a_minigpt_block_whose_mlp_is_a_lambda(tmp_path: Path) -> None:
    """KernelBench 44's trap in fp16: `self.mlpf = lambda x: ...` over the block's own layers.
    A deep copy of the model kept calling the original's fp16 layers (the fp32 oracle died
    with "mat1 and mat2 must have the same dtype", the patched copy's MLP stayed unpatched);
    fresh builds route all four Linears and check the block against the oracle."""
    run, _ = fabricate_run(FIXTURES / "minigpt_lambda.py", tmp_path / "run", dtype="fp16")
    done = autokernel("verify", str(run), "--device", "cpu", "--iters", "1")
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads((run / "verify.json").read_text())
    rows = routed(result)
    assert sorted(rows["matmul (linear)"]["modules"]) == ["attn.c_attn", "attn.c_proj",
                                                          "mlp.c_fc", "mlp.c_proj"]
    assert rows["matmul (linear)"]["calls_per_forward"] == 4
    # softmax(q @ kᵀ, masked `== 0`) @ v is one attention, the GELU module its whole forward
    assert rows["flash_attention"]["calls_per_forward"] == 1
    assert rows["flash_attention"]["scopes"] == ["attn"]
    assert rows["gelu"]["calls_per_forward"] == 1 and rows["layernorm"]["calls_per_forward"] == 1
    assert rows["add_layernorm"]["calls_per_forward"] == 1  # x + attn(...) into ln_2
    assert result["accuracy"]["passed"] and result["accuracy"]["oracle"] == "fp32"
    assert result["gradients"]["passed"] and "PASS" in done.stdout


def test_a_kernel_that_raises_inside_the_model_is_a_fail_not_a_traceback(tmp_path: Path) -> None:
    run, _ = fabricate_run(FIXTURES / "softmax.py", tmp_path / "run")
    kernel = next((run / "kernels").glob("*softmax.py"))
    kernel.write_text(kernel.read_text() + "\n\ndef kernel_fn(x):\n"
                      "    raise RuntimeError('an illegal memory access was encountered')\n")
    done = autokernel("verify", str(run), "--device", "cpu", "--iters", "1")
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    reason = ("the patched model's forward raised RuntimeError: an illegal memory access was "
              "encountered")
    assert f"FAIL: {reason}" in " ".join(done.stdout.split())
    result = json.loads((run / "verify.json").read_text())
    assert not result["passed"] and result["failure"] == reason


def test_an_unforeseen_failure_of_verify_is_one_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = fabricate_run(FIXTURES / "softmax.py", tmp_path / "run")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("timer broke\nsecond line")

    monkeypatch.setattr(verify_module, "measure_in_context", broken)
    with pytest.raises(RunError) as raised:
        verify_run(open_run(run), VerifyOptions(device=DEVICE, iters=1, compile=False))
    assert str(raised.value) == "verify failed: RuntimeError: timer broke"


EXAMPLE_WRAPPER = """import importlib.util, sys
import torch
_spec = importlib.util.spec_from_file_location("{name}_example", {path!r})
example = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = example  # its dataclasses look the module up
_spec.loader.exec_module(example)
Model = example.Model
{sizes}
"""
EXAMPLES = {
    # example file, tiny sizes, dtype, {target: calls per forward} once spliced in
    "vit_encoder": ("examples/models/vit_encoder.py",
                    "def get_inputs(): return example.inputs_for(example.TINY, 2)\n"
                    "def get_init_inputs(): return example.init_inputs_for(example.TINY)",
                    # Every norm but the first block's norm1 takes a residual add's result.
                    "fp32", {"matmul (linear)": 9, "flash_attention": 2, "layernorm": 1,
                             "add_layernorm": 4, "gelu": 2}),
    "mini_gpt_block": ("examples/kernelbench/11_mini_gpt_block.py",
                       "def get_inputs(): return [torch.randn(2, 16, 64)]\n"
                       "def get_init_inputs(): return [64, 4, 16]",
                       "fp16", {"matmul (linear)": 4, "flash_attention": 1, "layernorm": 1,
                                "add_layernorm": 1, "gelu": 1}),
    "linear_cross_entropy": ("examples/kernelbench/15_linear_cross_entropy.py",
                             "def get_inputs(): return example.inputs_for(40, 24, 300)\n"
                             "def get_init_inputs(): return [24, 300]",
                             "fp32", {"linear_cross_entropy": 1}),
    "mistral_decoder": ("examples/models/mistral_decoder.py",
                        "def get_inputs(): return example.inputs_for(example.TINY, 1, 16)\n"
                        "def get_init_inputs(): return example.init_inputs_for(example.TINY)",
                        "fp32", {"rmsnorm": 1, "add_rmsnorm": 4, "matmul (linear)": 8,
                                 "fused_mlp": 2,
                                 "rotary_embedding": 4, "flash_attention": 2}),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_models_are_spliced_in_end_to_end(name: str, tmp_path: Path) -> None:
    """ViT's explicit attention (the chain), the lambda-MLP MiniGPT block in fp16 (its masked
    attention a chain, its GELU module) and Mistral's rope(x, cos, sin) function, at CPU-test
    size."""
    path, sizes, dtype, expected = EXAMPLES[name]
    model_file = tmp_path / f"{name}_tiny.py"
    model_file.write_text(EXAMPLE_WRAPPER.format(name=name, path=str(REPO / path), sizes=sizes))
    run, plan = fabricate_run(model_file, tmp_path / "run", dtype=dtype)
    assert {t.label for t in plan.targets} == set(expected)
    assert all(not t.route.startswith("no") for t in plan.targets), [t.route for t in
                                                                      plan.targets]
    result = verify_run(open_run(run), VerifyOptions(device=DEVICE, iters=1, compile=False))
    calls = {label: row["calls_per_forward"] for label, row in routed(result).items()}
    assert calls == expected
    assert all(not row["fallbacks"] for row in result["kernels"])
    assert result["accuracy"]["passed"] and result["gradients"]["passed"]


def test_where_a_kernel_was_routed_is_said_in_one_place_with_its_plural() -> None:
    from autokernel.integrate.verify import routed_where

    assert routed_where({"modules": ["layers.0.norm"]}) == "1 module"
    assert routed_where({"modules": ["a", "b"], "functions": ["rope"], "scopes": ["", "blk"]}) \
        == "2 modules; rope; calls in the whole model, blk"
    assert routed_where({}) == "–"
