"""What torch.compile leaves (`compiled.py`, `compiled_map.py`): the compiled model profiled beside
the eager one, Inductor's kernels mapped to the plan's targets by the aten ops their names list.

Compiling is slow on the CPU (Inductor generates and builds C++), so one test compiles; the
mapping is tested from compiled rows written out, with Triton's names, on a real eager profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autokernel.profiling.classify import classify_profile
from autokernel.profiling.compiled import apply_compiled_profile
from autokernel.profiling.compiled_map import GENERIC_OPS, fused_ops
from autokernel.profiling.events import OpCall, RecordedProfile, TimedRow
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.plan import Plan
from autokernel.profiling.profiler import profile_model
from autokernel.profiling.ranking import build_plan, format_markdown, plan_rows, rank_plan
from autokernel.profiling.session import profile_plan

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fixtures" / "models"

VOCABULARY = {"_to_copy", "add", "mean", "mul", "pow", "rsqrt", "native_layer_norm", "var_mean",
              "_softmax", "addmm", "sub"}


@pytest.mark.parametrize("kernel, ops", [
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
     ["_to_copy", "add", "mean", "mul", "pow", "rsqrt"]),
    ("graph_0_cpp_fused_native_layer_norm_0", ["native_layer_norm"]),
    ("cpp_fused__softmax_add_3", ["_softmax", "add"]),
    ("triton_per_fused_add_native_layer_norm_sub_var_mean_12",
     ["add", "native_layer_norm", "sub", "var_mean"]),
    ("triton_tem_fused_addmm_0", ["addmm"]),
    ("triton_poi_fused_unknownop_mul_1", ["unknownop", "mul"]),
    ("ampere_fp16_s16816gemm_fp16_128x64", None),
    ("aten::addmm", None),
])
def test_inductor_kernel_names_are_cut_into_aten_ops(kernel: str, ops: list[str] | None) -> None:
    assert fused_ops(kernel, VOCABULARY) == ops


def _eager(name: str) -> tuple[RecordedProfile, list, Plan]:
    loaded = load_model_file(MODELS / f"{name}.py", device="cpu")
    record = profile_model(loaded, warmup=1, iters=1)
    attributions = classify_profile(record)
    return record, attributions, build_plan(record, model=name, class_name="Model",
                                            attributions=attributions)


def _compiled(rows: list[tuple[str, float, str | None]]) -> RecordedProfile:
    """A GPU-style compiled profile: Triton kernels launched by no op, extern kernels by theirs."""
    ops: dict[int, OpCall] = {}
    timed = []
    for name, us, op in rows:
        op_id = None
        if op is not None:
            op_id = len(ops) + 1
            ops[op_id] = OpCall(op_id, op)
        timed.append(TimedRow(name, us, op_id))
    return RecordedProfile("cuda", "fp16", 1, timed, ops, time_source="device kernels")


def test_compiled_kernels_go_to_the_targets_whose_ops_they_run() -> None:
    """A hand-written RMSNorm fused into one Triton kernel is the rmsnorm target's; the SwiGLU's
    GEMMs (extern, launched by aten::mm) and its fused silu·mul are fused_mlp's; a kernel of ops
    the eager model never ran, and an add the model never called, are "other"."""
    record, attributions, plan = _eager("rmsnorm_handwritten")
    apply_compiled_profile(plan, record, attributions, _compiled([
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", 30.0, None),
        ("triton_red_fused_add_mean_mul_pow_rsqrt_1", 10.0, None),
        ("triton_poi_fused_mystery_2", 60.0, None),
    ]))
    rmsnorm = next(t for t in plan.targets if t.kernel_type == "rmsnorm")
    assert rmsnorm.compile_share == pytest.approx(0.4)
    assert rmsnorm.compile_ms == pytest.approx(0.04)
    assert plan.compile_other_share == pytest.approx(0.6)
    assert plan.compile_ms == pytest.approx(0.1)

    record, attributions, plan = _eager("swiglu")
    apply_compiled_profile(plan, record, attributions, _compiled([
        ("sm90_xmma_gemm_f16f16_f32", 50.0, "aten::mm"),
        ("triton_poi_fused_mul_silu_0", 20.0, None),
        ("triton_poi_fused_add_1", 5.0, None),
    ]))
    mlp = next(t for t in plan.targets if t.kernel_type == "fused_mlp")
    assert mlp.compile_share == pytest.approx(70 / 75)
    shares = sum(t.compile_share for t in plan.targets) + plan.compile_other_share
    assert shares == pytest.approx(1.0)


def test_ranking_by_the_compiled_shares_reorders_and_says_so() -> None:
    record, attributions, plan = _eager("minigpt_lambda")
    eager_order = [t.label for t in plan.targets]
    # Compiled, the layernorms are fused into little and the GEMMs are all that is left.
    apply_compiled_profile(plan, record, attributions, _compiled([
        ("triton_per_fused_native_layer_norm_0", 1.0, None),
        ("sm90_gemm", 60.0, "aten::addmm"),
        ("triton_poi_fused_add_mul_pow_tanh_1", 39.0, None),
    ]))
    rank_plan(plan, "compile")
    order = [t.label for t in plan.targets]
    # (The eager order is measured on this CPU: on a busy machine it can be the same.)
    assert order[:2] == ["matmul (linear)", "gelu"]
    shares = [t.compile_share for t in plan.targets]
    assert shares == sorted(shares, reverse=True)
    assert [t.rank for t in plan.targets] == list(range(1, len(order) + 1))
    first = plan.targets[0]
    assert first.amdahl_2x == pytest.approx(1 / (1 - first.compile_share / 2))
    assert "Ranked by share under torch.compile" in format_markdown(plan)
    assert plan_rows(plan)[0][3] == f"{first.compile_share:.1%}"  # the compiled column
    rank_plan(plan, "eager")
    assert [t.label for t in plan.targets] == eager_order


def test_a_compile_that_fails_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Inductor: no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken)
    loaded = load_model_file(MODELS / "softmax.py", device="cpu")
    _, plan = profile_plan(loaded, model="softmax", class_name="Model", warmup=0, iters=1,
                           rank_by="compile")
    assert plan.compile_ms is None and plan.rank_by == "eager"
    assert plan.notes == ["torch.compile failed, so the plan has no compiled shares: "
                          "RuntimeError: Inductor: no C++ compiler",
                          "ranked by eager share: the compiled model has no profile"]
    assert "Note: torch.compile failed" in format_markdown(plan)


def test_graph_breaks_are_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model Dynamo breaks into several graphs is still profiled compiled; the plan says so."""
    from torch._dynamo.utils import counters

    from autokernel.profiling import compiled

    def broken_into_graphs(loaded: object, iters: int = 5, progress: object = None
                           ) -> RecordedProfile:
        counters["graph_break"]["print() in forward"] += 2
        return _compiled([("cpp_fused__softmax_0", 10.0, None)])

    monkeypatch.setattr(compiled, "profile_compiled", broken_into_graphs)
    loaded = load_model_file(MODELS / "softmax.py", device="cpu")
    _, plan = profile_plan(loaded, "softmax", "Model", warmup=0, iters=1, compiled=True)
    assert plan.targets[0].compile_share == pytest.approx(1.0)
    assert plan.notes == ["torch.compile: 2 graph breaks; the compiled figures include the "
                          "eager code between the graphs"]


def test_on_the_cpu_the_compiled_profile_costs_nothing_unless_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not compiled unless asked on the CPU, and nothing on the way to a plan imports
    torch._inductor (seconds of start-up) or the compiled profile's module at its top."""
    import ast

    from autokernel.profiling import compiled

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compiled model was profiled on the CPU unasked")

    monkeypatch.setattr(compiled, "add_compiled_shares", forbidden)
    loaded = load_model_file(MODELS / "softmax.py", device="cpu")
    _, plan = profile_plan(loaded, "softmax", "Model", warmup=0, iters=1)
    assert plan.compile_ms is None and plan.rank_by == "eager" and not plan.notes
    package = REPO / "autokernel"
    for name in ("profiling/session.py", "profiling/profiler.py", "profiling/ranking.py",
                 "profiling/plan.py", "profiling/splice_check.py", "cli/profile.py"):
        tree = ast.parse((package / name).read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        imported = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.startswith(("torch._inductor", "torch._dynamo",
                                                         "autokernel.profiling.compiled"))], name


def test_the_compiled_cpu_model_is_profiled_and_mapped() -> None:
    """One real torch.compile (Inductor's C++ kernels, each in a profiler range named after its
    aten ops): every target gets a share, and the shares add up."""
    loaded = load_model_file(MODELS / "rmsnorm_handwritten.py", device="cpu")
    _, plan = profile_plan(loaded, model="rmsnorm", class_name="Model", warmup=0, iters=1,
                           compiled=True, rank_by="compile")
    assert plan.rank_by == "compile" and plan.compile_ms > 0
    rmsnorm = next(t for t in plan.targets if t.kernel_type == "rmsnorm")
    assert rmsnorm.compile_share > 0.3
    shares = sum(t.compile_share for t in plan.targets) + plan.compile_other_share
    assert shares == pytest.approx(1.0)
    assert not any("graph break" in note for note in plan.notes)


@pytest.mark.gpu
def test_triton_kernels_of_the_compiled_model_map_to_the_targets() -> None:
    """On a GPU, Inductor's Triton kernels (triton_red_fused_..._pow_rsqrt...) are the rmsnorm's
    and its GEMMs (extern cuBLAS) the linear layers'; little is left to "other"."""
    loaded = load_model_file(REPO / "examples" / "models" / "tiny_llama.py", device="cuda",
                             dtype="fp16")
    record, plan = profile_plan(loaded, model="tiny_llama", class_name="Model", warmup=1,
                                iters=2)
    assert plan.compile_ms is not None and plan.compile_ms > 0, plan.notes
    kinds = {t.kernel_type: t.compile_share for t in plan.targets}
    assert kinds.get("rmsnorm", 0) > 0 and kinds.get("matmul", 0) > 0, kinds
    assert plan.compile_other_share < 0.5
    assert set(GENERIC_OPS).isdisjoint({"rsqrt", "mean", "_softmax"})


def test_inductor_kernels_are_ops_and_other_unnamespaced_ranges_are_seen_through() -> None:
    """A CPU profile's Inductor kernels are ranges without a namespace, like a custom
    autograd.Function's forward; only the latter is a range its ops are seen through."""
    from autokernel.profiling.events import is_op_name

    assert is_op_name("aten::mm") and is_op_name("cpp_fused__softmax_0")
    assert is_op_name("graph_0_cpp_fused_add_mean_1")
    assert is_op_name("triton_per_fused_native_layer_norm_2")
    assert not is_op_name("LigerRMSNormFunction") and not is_op_name("bias_gelu")
