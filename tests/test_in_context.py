"""In-context selection end to end, with injected measurements: a kernel measured slower in the
model is never routed, by verify, `autokernel.load(...).patch`/`.optimize`, the export or the
kernelbench record.

The real verify runs on a real finished run (tiny LLaMA, CPU interpreter): every configuration's
model is built and patched and runs its forward; only the clock is replaced
(`in_context.time_configs`), by made-up per-round times in which one kernel makes the model
faster and every other one slower, and the judging that the CPU normally skips is switched on.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
import torch
from conftest import DEVICE
from finished_run import TINY_LLAMA, made_run, run_dir  # noqa: F401 - fixtures

import autokernel
from autokernel.integrate import in_context
from autokernel.integrate import verify as verify_module
from autokernel.integrate.ablation import ConfigRounds
from autokernel.integrate.export import export_run
from autokernel.integrate.loader import RunError, open_run
from autokernel.integrate.verify import VerifyOptions, verify_run
from autokernel.kernelbench.problem import target_rows
from autokernel.profiling.model_loader import load_model_file, run_forward

WINNER = "add_rmsnorm"
ROUNDS = 12


def _tags(run: Path) -> dict[str, str]:
    state = json.loads((run / "state.json").read_text())
    return {t["kernel_type"]: t["tag"] for t in state["targets"]}


def fake_clock(winner: str):
    """time_configs with made-up rounds: the winner saves 8% of the forward, every other kernel
    costs 5%, in both figures; the same drift for every configuration of a round."""
    rng = random.Random(3)

    def time_configs(functions, setup):
        drifts = [1 + 0.03 * rng.random() for _ in range(ROUNDS)]
        timed = {}
        for name in functions:
            config = set() if name == "none" else set(name.split("+"))
            mean = 1000.0 * (1 - 0.08 * (winner in config) + 0.05 * len(config - {winner}))
            rounds = [mean * d * (1 + 0.001 * rng.gauss(0, 1)) for d in drifts]
            timed[name] = ConfigRounds({"wall": rounds, "device": list(rounds)})
        return timed, {"method": "injected", "wall_rounds": ROUNDS, "device_rounds": ROUNDS}

    return time_configs


def test_a_kernel_measured_slower_in_the_model_is_never_routed(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    tags = _tags(run_dir)
    winner = tags[WINNER]
    monkeypatch.setattr(in_context, "time_configs", fake_clock(winner))
    monkeypatch.setattr(verify_module, "selection_is_judged", lambda run, device: True)
    result = verify_run(open_run(run_dir), VerifyOptions(device=DEVICE, iters=ROUNDS,
                                                         compile=False, gradients=False))

    assert result["selection"] == {"eager": [winner]}
    rows = {row["kernel"]: row for row in result["ablation"]}
    assert set(rows) == set(tags.values())
    assert rows[winner]["decision"] == "in" and rows[winner]["speedup"]["wall"]["low"] > 1
    for tag in set(tags.values()) - {winner}:
        assert rows[tag]["decision"] == "out" and rows[tag]["reason"].startswith("alone:")
        assert rows[tag]["speedup"]["wall"]["high"] < 1  # measured slower in the model
    assert {r["tag"]: r["selected"]["eager"] for r in result["kernels"]} == {
        tag: tag == winner for tag in tags.values()}
    assert result["delivery"]["mode"] == "eager" and result["delivery"]["kernels"] == [winner]
    patched = result["timing"]["wall"]["contestants"]["patched"]["median_us"]
    eager = result["timing"]["wall"]["contestants"]["eager"]["median_us"]
    assert patched < eager  # "patched" is the model with the selected kernels only

    # autokernel.load: only the kept kernel is loaded, patched in, and delivered.
    loaded = autokernel.load(run_dir, device=DEVICE)
    assert [k.tag for k in loaded.kernels] == [winner]
    model = load_model_file(TINY_LLAMA, dtype="fp32", device=DEVICE)
    expected = run_forward(model)
    patch = loaded.patch(model.model)
    torch.testing.assert_close(run_forward(model), expected, atol=1e-5, rtol=1e-5)
    assert {tag: stats.calls for tag, stats in patch.report.kernels.items()} == {winner: 4}
    patch.unpatch()
    fast = loaded.optimize(model.model)
    assert fast.delivery.mode == "eager" and fast.delivery.kernels == (winner,)
    with torch.no_grad():
        torch.testing.assert_close(fast.model(*model.inputs), expected, atol=1e-5, rtol=1e-5)
    fast.patch.unpatch()
    everything = autokernel.load(run_dir, device=DEVICE, all_kernels=True)
    assert len(everything.kernels) == len(tags)

    # The export carries the same choice.
    path = export_run(open_run(run_dir), tmp_path / "tiny_kernels.py")
    spec = importlib.util.spec_from_file_location("tiny_kernels", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tiny_kernels", module)  # as `import tiny_kernels` does
    spec.loader.exec_module(module)
    assert [entry["tag"] for entry in module.MANIFEST] == [winner]
    assert module.DELIVERY["kernels"] == [winner]

    # kernelbench's record says which kernels the delivered model routes.
    state = open_run(run_dir)
    spliced = {row["tag"]: row["spliced"] for row in target_rows(state.state, state.plan, result)}
    assert spliced == {tag: tag == winner for tag in tags.values()}


def test_optimize_before_verify_says_what_to_run(run_dir: Path) -> None:  # noqa: F811
    loaded = autokernel.load(run_dir, device=DEVICE)
    model = load_model_file(TINY_LLAMA, dtype="fp32", device=DEVICE).model
    with pytest.raises(RunError, match="autokernel verify"):
        loaded.optimize(model)


def _row(mode: str, kernels: tuple[str, ...], wall: float, device: float | None) -> dict:
    figure = lambda us: {"median_us": us, "iqr_us": us * 0.01, "samples": 40}  # noqa: E731
    return {"delivery": {"mode": mode, "kernels": list(kernels)},
            "label": f"{mode} {kernels}", "wall": figure(wall),
            "device": figure(device) if device else None}


@pytest.mark.parametrize("rows, expected", [
    # The H200's Mistral-style run: the kernels in a CUDA graph win the wall time (1.01 ms
    # against reduce-overhead's 1.12) but lose device time to Inductor (888 µs against 791):
    # reduce-overhead without kernels is delivered.
    ([("eager", (), 2660, 1250), ("compile", (), 1580, 791), ("reduce-overhead", (), 1120, 791),
      ("cuda-graph", (), 1380, 1250), ("cuda-graph", ("a", "b"), 1010, 888)],
     ("reduce-overhead", [])),
    # Kernels that beat Inductor in the graph win both figures: delivered.
    ([("compile", (), 1580, 791), ("reduce-overhead", (), 1120, 791),
      ("reduce-overhead", ("a",), 1040, 740), ("cuda-graph", ("a", "b"), 1010, 900)],
     ("reduce-overhead", ["a"])),
    # No compiled mode (it failed to compile): the fastest plain delivery is the reference.
    ([("eager", (), 900, 800), ("cuda-graph", (), 850, 800), ("cuda-graph", ("a",), 820, 780)],
     ("cuda-graph", ["a"])),
])
def test_the_delivery_is_never_slower_than_the_faster_compile_mode(rows, expected) -> None:
    from autokernel.integrate.in_context import choose

    best, why = choose([_row(*r) for r in rows])
    assert (best["delivery"]["mode"], best["delivery"]["kernels"]) == expected
    assert why
