"""`autokernel profile`: loading, counting device time once, classification, the plan, the CLI.

CPU tests profile tiny models (tests/fixtures/models/, one per pattern) with CPU op self times;
the GPU-only paths (device kernel rows, nvjet names, correlation ids) are tested from a recorded
profile fixture and from FunctionEvent stand-ins.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fabricated_run import fabricate_run
from typer.testing import CliRunner

import autokernel as autokernel_package
from autokernel.cli import app
from autokernel.cli.profile import print_plan
from autokernel.profiling.classify import SiteKey, classify_kernel_name, classify_profile
from autokernel.profiling.events import ModuleCall, ModuleInfo, OpCall, RecordedProfile, TimedRow
from autokernel.profiling.model_loader import (
    ModelLoadError,
    import_model_file,
    load_model_file,
    run_forward,
)
from autokernel.profiling.plan import Plan, amdahl_speedup
from autokernel.profiling.profiler import SCOPE_PREFIX, profile_model, record_from_events
from autokernel.profiling.ranking import (
    PLAN_COLUMNS, _Tally, _target, build_plan, format_markdown, plan_rows,
)

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "fixtures" / "models"
EXAMPLES = REPO / "examples" / "models"
H100_EVENTS = REPO / "tests" / "fixtures" / "h100_block_events.json"
RECORDED = sorted((REPO / "tests" / "fixtures" / "recorded").glob("*.json"))

runner = CliRunner()


def cpu_plan(name: str, dtype: str = "fp32", folder: Path = MODELS) -> Plan:
    loaded = load_model_file(folder / f"{name}.py", dtype=dtype, device="cpu")
    record = profile_model(loaded, warmup=1, iters=2)
    return build_plan(record, model=name, class_name="Model")


def types_of(plan: Plan) -> dict[str, object]:
    """Targets by label: the kernel type, with matmul's role ("matmul (linear)")."""
    labels = [t.label for t in plan.targets]
    assert len(labels) == len(set(labels)), f"two targets share a label: {labels}"
    return {t.label: t for t in plan.targets}


def assert_shares_add_up(plan: Plan) -> None:
    total = sum(t.share for t in plan.targets) + plan.other_share
    assert total == pytest.approx(1.0, abs=0.01)
    assert sum(t.time_ms for t in plan.targets) + plan.other_ms == pytest.approx(plan.total_ms)


# ---------------------------------------------------------------------------------------------
# Classification on small CPU models, one per pattern

CASES = [
    # model, {target label: calls per forward}, kernel types that must not appear
    ("matmul_mixed", {"matmul (linear)": 2, "matmul (gemm)": 1, "matmul (batched)": 1},
     {"fused_mlp"}),
    ("sdpa", {"flash_attention": 1}, {"softmax", "matmul"}),
    ("explicit_attention", {"flash_attention": 1}, {"softmax", "matmul"}),
    ("explicit_attention_where", {"flash_attention": 1}, {"softmax", "matmul"}),
    ("padded_attention", {"softmax": 1, "matmul (batched)": 2}, {"flash_attention"}),
    # minGPT's mask through `== 0` is a side branch of constants: proved causal, one call.
    ("attention_matmuls", {"matmul (linear)": 4, "flash_attention": 1}, {"softmax"}),
    ("swiglu", {"fused_mlp": 1}, {"matmul"}),
    ("gelu_mlp", {"matmul (linear)": 2}, {"fused_mlp"}),
    ("gated_gelu_mlp", {"fused_mlp": 1}, {"matmul", "gelu"}),  # GeGLU
    ("mixed_gated_mlps", {"fused_mlp": 2}, {"matmul", "gelu"}),
    ("rmsnorm_handwritten", {"rmsnorm": 2}, {"layernorm", "reduce"}),
    ("rmsnorm_builtin", {"rmsnorm": 2}, {"layernorm"}),
    ("layernorm", {"layernorm": 3}, {"rmsnorm"}),
    ("cross_entropy", {"cross_entropy": 1}, {"softmax"}),
    ("log_softmax_nll", {"cross_entropy": 1}, {"softmax"}),
    # The head's linear and the loss of its shifted output: one call, neither a matmul nor a
    # cross_entropy of its own.
    ("linear_cross_entropy", {"linear_cross_entropy": 1, "layernorm": 1},
     {"matmul", "cross_entropy"}),
    # A residual add and the RMSNorm it feeds (nn.RMSNorm, a hand-written one): one call each.
    ("add_rmsnorm", {"add_rmsnorm": 2, "matmul (linear)": 4}, {"rmsnorm"}),
    # BERT's post-norm and GPT-2's pre-norm add + nn.LayerNorm, and an add + F.layer_norm.
    ("add_layernorm", {"add_layernorm": 3, "layernorm": 1, "matmul (linear)": 4}, {"rmsnorm"}),
    ("rope_inline", {"rotary_embedding": 2}, set()),
    ("softmax", {"softmax": 1}, set()),
    ("reduce", {"reduce": 2}, set()),  # the last-dim and the first-dim sum
]


@pytest.mark.parametrize("name, expected, forbidden", CASES, ids=[c[0] for c in CASES])
def test_classification(name: str, expected: dict[str, int], forbidden: set[str]) -> None:
    plan = cpu_plan(name)
    found = types_of(plan)
    for label, calls in expected.items():
        assert label in found, f"{name}: no {label} target in {list(found)}"
        assert found[label].calls == calls, (name, label)
    kernel_types = {t.kernel_type for t in plan.targets}
    assert not forbidden & kernel_types, f"{name}: unexpected {forbidden & kernel_types}"
    assert_shares_add_up(plan)


def assert_heaviest_shape_first(target) -> None:
    """The target's shapes run from most to least profiled time; the first is benchmarked."""
    time_by_shape: dict[tuple[int, ...], float] = {}
    for site in target.call_sites:
        time_by_shape[tuple(site.shape)] = time_by_shape.get(tuple(site.shape), 0) + site.time_ms
    assert target.shapes == [list(s) for s in sorted(time_by_shape, key=time_by_shape.get,
                                                     reverse=True)]
    assert target.bench_shape == target.shapes[0]


def test_matmul_shapes_are_b_m_n_k_per_role() -> None:
    found = types_of(cpu_plan("matmul_mixed"))
    linear, gemm, batched = (found[f"matmul ({role})"] for role in ("linear", "gemm", "batched"))
    # linear: input [4, 24, 96], weight [80, 96] → B = 1, M = 4*24, N = 80, K = 96.
    # What the op's input generator cannot take (a bias) is a note, not a parameter.
    sites = {(s.aten_op, tuple(s.shape)): s for s in linear.call_sites}
    assert sites[("aten::linear", (1, 96, 80, 96))].notes == {"bias": True}
    assert sites[("aten::linear", (1, 96, 72, 80))].notes == {}
    # y @ self.weight folds y's leading dims into rows; bmm's batch is B.
    assert [s.shape for s in gemm.call_sites] == [[1, 96, 40, 72]]
    assert [(s.aten_op, s.shape) for s in batched.call_sites] == [("aten::bmm", [6, 32, 40, 48])]
    for target in (linear, gemm, batched):
        assert all(site.params == {} for site in target.call_sites)  # no transposed operand
        assert target.dims == ["B", "M", "N", "K"] and target.kernel_type == "matmul"
        assert_heaviest_shape_first(target)
    assert (linear.role, gemm.role, batched.role) == ("linear", "gemm", "batched")


def test_attention_products_are_a_batched_target_beside_the_linears() -> None:
    """minGPT's attention (q @ kᵀ, masked through `== 0`, softmax, @ v) is one attention call
    beside the four linear layers, each benchmarked at its own heaviest shape; an attention whose
    mask comes from the inputs (padding) is not one: its two products are one batched matmul
    target with its own shapes."""
    found = types_of(cpu_plan("attention_matmuls"))
    linear, attention = found["matmul (linear)"], found["flash_attention"]
    tokens, d, heads = 2 * 32, 64, 4
    assert sorted(map(tuple, linear.shapes)) == sorted([
        (1, tokens, 3 * d, d), (1, tokens, d, d), (1, tokens, 4 * d, d), (1, tokens, d, 4 * d)])
    assert attention.bench_shape == [2, heads, 32, d // heads] and attention.params["causal"]
    batched = types_of(cpu_plan("padded_attention"))["matmul (batched)"]
    scores, values = (2 * heads, 48, 48, 16), (2 * heads, 48, 16, 48)
    assert sorted(map(tuple, batched.shapes)) == sorted([scores, values])
    by_shape = {tuple(s.shape): s for s in batched.call_sites}
    # q @ k.transpose(-2, -1): B is the transposed view of k, and the harness is told so.
    assert by_shape[scores].params == {"b_transposed": True}
    assert by_shape[values].params == {}
    assert batched.params == by_shape[tuple(batched.bench_shape)].params
    for target in (linear, batched):
        assert_heaviest_shape_first(target)


def test_handwritten_rmsnorm_is_one_target_with_module_eps() -> None:
    rmsnorm = types_of(cpu_plan("rmsnorm_handwritten"))["rmsnorm"]
    # pow, mean, add, rsqrt, mul, casts of one module call are ONE call, at [M, N] = [120, 96].
    assert rmsnorm.calls == 2 and rmsnorm.bench_shape == [120, 96]
    assert {s.module: s.params["eps"] for s in rmsnorm.call_sites} == {"norm_a": 1e-6,
                                                                       "norm_b": 1e-5}
    assert all(s.calls == 1 for s in rmsnorm.call_sites)


@pytest.mark.parametrize("routable_is_hotter", [True, False])
def test_a_target_is_verified_with_the_params_of_a_site_verify_can_route(
        routable_is_hotter: bool) -> None:
    """nn.RMSNorm (eps 1e-6) and F.rms_norm (eps 1e-5) at one shape: whichever ran hotter, the
    kernel is verified with the module's eps, so verify routes the module; a site with another
    eps is marked as refused. Before, the hotter F.rms_norm's eps made the kernel unroutable
    everywhere while the plan said "part" (a CI failure that depended on CPU timing)."""
    module = SiteKey("norm", "aten::rms_norm", (120, 96), "fp32", (("eps", 1e-6),))
    function = SiteKey("", "aten::rms_norm", (120, 96), "fp32", (("eps", 1e-5),))
    hot, cold = _Tally(9.0, {("a", 0)}), _Tally(1.0, {("b", 0)})
    sites = {module: hot, function: cold} if routable_is_hotter else {module: cold, function: hot}
    modules = {"": ModuleInfo(type="model.Model"),
               "norm": ModuleInfo(type="torch.nn.modules.normalization.RMSNorm",
                                  params={"weight": [96]}, attrs={"eps": 1e-6})}
    target = _target("rmsnorm", "", sites, 1, 10.0, modules)
    assert target.params == {"eps": 1e-6}
    assert target.route == "part: module; no: F.rms_norm outside nn.RMSNorm"
    other_eps = SiteKey("norm2", "aten::rms_norm", (120, 96), "fp32", (("eps", 1e-5),))
    modules["norm2"] = modules["norm"]
    target = _target("rmsnorm", "", {module: hot, other_eps: cold}, 1, 10.0, modules)
    assert {s.module: s.route for s in target.call_sites} == {
        "norm": "module", "norm2": "no: eps=1e-05 (verified: 1e-06)"}


def test_an_attention_site_with_another_scale_is_refused_the_default_is_its_value() -> None:
    default = SiteKey("a", "aten::scaled_dot_product_attention", (2, 4, 64, 64), "fp32",
                      (("causal", True), ("scale", None)))
    explicit = SiteKey("b", "aten::scaled_dot_product_attention", (2, 4, 64, 64), "fp32",
                       (("causal", True), ("scale", 0.125)))
    other = SiteKey("c", "aten::scaled_dot_product_attention", (2, 4, 64, 64), "fp32",
                    (("causal", True), ("scale", 0.3)))
    sites = {default: _Tally(5.0, {("a", 0)}), explicit: _Tally(3.0, {("b", 0)}),
             other: _Tally(1.0, {("c", 0)})}
    target = _target("flash_attention", "", sites, 1, 10.0, {})
    assert {s.module: s.route for s in target.call_sites} == {
        "a": "call", "b": "call", "c": "no: scale=0.3 (verified: 0.125)"}


def test_layernorm_is_not_rmsnorm() -> None:
    plan = cpu_plan("layernorm")
    layernorm = types_of(plan)["layernorm"]
    # The weight-only hand-written LayerNorm subtracts the mean: a LayerNorm (whose centered
    # input's RMS it holds), never an rmsnorm; written out, verify does not route it.
    assert {s.module for s in layernorm.call_sites} == {"ln", "ln_no_bias", "handwritten"}
    assert "rmsnorm" not in types_of(plan)
    routes = {s.module: s.route for s in layernorm.call_sites}
    assert routes["handwritten"].startswith("no: written out")


def test_swiglu_takes_its_linears_and_shape() -> None:
    fused = types_of(cpu_plan("swiglu"))["fused_mlp"]
    assert fused.bench_shape == [48, 64, 160]  # M = 2*24, D = 64, H = 160
    assert fused.call_sites[0].module == "mlp"


def test_geglu_records_its_activation_and_mixed_activations_are_not_merged() -> None:
    """A GeGLU is fused_mlp with its GELU form as the activation param (an inline F.gelu: the
    exact form; nn.GELU(approximate="tanh"): gelu_tanh); a SwiGLU names none (SiLU, the default).
    One target holding both verifies one activation, and its other sites say verify refuses
    them."""
    geglu = types_of(cpu_plan("gated_gelu_mlp"))["fused_mlp"]
    assert geglu.params == {"activation": "gelu"} and geglu.bench_shape == [48, 64, 160]
    assert geglu.call_sites[0].aten_op == "geglu(written out)"
    mixed = types_of(cpu_plan("mixed_gated_mlps"))["fused_mlp"]
    sites = {s.module: s for s in mixed.call_sites}
    assert sites["swiglu"].params == {} and sites["swiglu"].shape == [48, 64, 512]
    assert sites["geglu"].params == {"activation": "gelu_tanh"}
    verified = mixed.params.get("activation", "silu")
    refused = "geglu" if verified == "silu" else "swiglu"
    assert sites[refused].route.startswith("no: activation=")
    assert sites[refused].route.endswith(f"(verified: {verified})")
    assert sites["swiglu" if refused == "geglu" else "geglu"].route == "module"


def test_sdpa_and_explicit_attention_params() -> None:
    sdpa = types_of(cpu_plan("sdpa"))["flash_attention"]
    assert sdpa.bench_shape == [2, 4, 64, 32] and sdpa.params["causal"] is True
    explicit = types_of(cpu_plan("explicit_attention"))["flash_attention"]
    assert explicit.bench_shape == [2, 4, 48, 16]
    assert explicit.params["causal"] is True
    assert explicit.call_sites[0].aten_op.startswith("softmax(QK^T)V")
    hf_style = types_of(cpu_plan("explicit_attention_where"))["flash_attention"]
    assert hf_style.params == {"causal": True, "scale": pytest.approx(0.25)}  # / full([], 4.0)
    assert hf_style.call_sites[0].module == "attn"


def test_tiny_llama_ranks_every_llama_pattern() -> None:
    plan = cpu_plan("tiny_llama", folder=EXAMPLES)
    found = types_of(plan)
    # 2 layers: q, k, v, o projections + the output head; RoPE on q and k per layer.
    assert found["matmul (linear)"].calls == 9
    assert [t.label for t in plan.targets].count("matmul (linear)") == 1
    assert found["fused_mlp"].calls == 2 and found["fused_mlp"].bench_shape == [32, 64, 176]
    # Every norm but the first layer's first (it follows the embedding) follows a residual add:
    # 4 add_rmsnorm calls, 1 plain rmsnorm.
    assert found["add_rmsnorm"].calls == 4 and found["rmsnorm"].calls == 1
    assert found["rotary_embedding"].calls == 4
    assert found["flash_attention"].calls == 2 and found["flash_attention"].params["causal"]
    assert "layernorm" not in found and "reduce" not in found
    assert [t.rank for t in plan.targets] == list(range(1, len(plan.targets) + 1))
    assert_shares_add_up(plan)


def test_target_params_are_what_the_ops_input_generator_takes() -> None:
    """The loop hands Target.params to the harness, which calls make_inputs(**params)."""
    from autokernel.ops import KERNEL_TYPES, get_spec
    from autokernel.ops.spec import parse_dtype

    plans = [cpu_plan(name) for name, _, _ in CASES]
    plans.append(build_plan(RecordedProfile.load(H100_EVENTS), model="block", class_name="M"))
    checked = set()
    for plan in plans:
        for target in plan.targets:
            spec = get_spec(target.kernel_type)
            shape = tuple(min(d, 64) for d in target.bench_shape)
            generator = torch.Generator().manual_seed(0)
            inputs = spec.make_inputs(shape, parse_dtype(target.dtype), "cpu", generator,
                                      "normal", **target.params)
            assert inputs, target.kernel_type
            checked.add(target.kernel_type)
    assert checked == set(KERNEL_TYPES)


def test_no_optimizable_kernel_says_so() -> None:
    plan = cpu_plan("no_target")
    assert plan.targets == [] and plan.other_share == pytest.approx(1.0)
    assert "no optimizable kernel" in plan.message and "aten::conv2d" in plan.message
    from autokernel.ops import KERNEL_TYPES  # the count comes from the registry (13 today)

    assert f"in the {len(KERNEL_TYPES)} kernel types" in plan.message


# ---------------------------------------------------------------------------------------------
# Counting time once


def test_cpu_rows_are_op_self_times_counted_once() -> None:
    loaded = load_model_file(MODELS / "gelu_mlp.py", device="cpu")
    with torch.no_grad():
        from torch.profiler import ProfilerActivity, profile

        from autokernel.profiling.profiler import module_scopes

        with module_scopes(loaded.model), profile(activities=[ProfilerActivity.CPU],
                                                  record_shapes=True) as prof:
            run_forward(loaded)
    events = prof.events()
    record = record_from_events(events, device="cpu", dtype="fp32", iterations=1)
    ops = [e for e in events if not e.is_user_annotation]
    roots = [e for e in ops if e.cpu_parent is None or e.cpu_parent.is_user_annotation]
    inclusive = sum(e.time_range.end - e.time_range.start for e in roots)
    # Each op's self time once: the total is the root ops' inclusive time, not the sum of every
    # row's inclusive time (which counts aten::linear and its aten::addmm twice).
    assert record.total_us == pytest.approx(inclusive, rel=1e-6)
    assert record.total_us < sum(e.time_range.end - e.time_range.start for e in ops)
    # Every op ran inside the model's scope, and inside the submodule that called it.
    assert all(record.module_calls[op.scopes[0]].path == "" for op in record.ops.values())
    paths = {record.module_calls[op.scopes[-1]].path for op in record.ops.values()}
    assert paths == {"fc", "act", "proj"}


def _fake_event(name: str, start: float, end: float, device: str = "CPU", **extra: object):
    base = dict(
        name=name, id=extra.pop("id", 0), time_range=SimpleNamespace(start=start, end=end),
        device_type=SimpleNamespace(name=device), is_async=False, is_user_annotation=False,
        activity_type=None, cpu_parent=None, cpu_children=[], kernels=[], input_shapes=[],
        input_dtypes=[], concrete_inputs=[], linked_correlation_id=0,
    )
    base.update(extra)
    return SimpleNamespace(**base)


def test_device_time_counts_kernel_rows_only_not_the_cpu_ops_that_launched_them() -> None:
    """The double-count trap: CPU op rows carry their kernels' device time too."""
    gemm_us, silu_us = 500.0, 180.0
    kernel = SimpleNamespace(name="nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT",
                             duration=gemm_us)
    scope = _fake_event(SCOPE_PREFIX + "fc", 0, 100, is_user_annotation=True,
                        activity_type="user_annotation")
    linear = _fake_event("aten::linear", 1, 90, id=11, activity_type="cpu_op", cpu_parent=scope,
                         input_shapes=[[8, 512, 1024], [4096, 1024], [4096]],
                         input_dtypes=["c10::Half"] * 3, self_device_time_total=gemm_us)
    addmm = _fake_event("aten::addmm", 2, 80, id=12, activity_type="cpu_op", cpu_parent=linear,
                        kernels=[kernel], self_device_time_total=gemm_us)
    launch = _fake_event("cudaLaunchKernel", 3, 4, activity_type="cuda_runtime",
                         cpu_parent=addmm)
    silu = _fake_event("aten::silu", 101, 110, id=13, activity_type="cpu_op",
                       self_device_time_total=silu_us)
    overhead = _fake_event("Activity Buffer Request", 0, 50, activity_type="overhead",
                           self_device_time_total=51.0)
    gpu_kernel = _fake_event(kernel.name, 200, 200 + gemm_us, device="CUDA", activity_type="kernel",
                             linked_correlation_id=12)
    silu_kernel = _fake_event("void at::native::vectorized_elementwise_kernel<4, silu>", 800,
                              800 + silu_us, device="CUDA", activity_type="kernel",
                              linked_correlation_id=13)
    gpu_annotation = _fake_event(SCOPE_PREFIX + "fc", 190, 800, device="CUDA",
                                 activity_type="gpu_user_annotation")
    memset = _fake_event("Memset (Device)", 150, 151.5, device="CUDA", activity_type="gpu_memset")
    events = [scope, linear, addmm, launch, silu, overhead, gpu_kernel, silu_kernel,
              gpu_annotation, memset]

    record = record_from_events(events, device="cuda", dtype="fp16", iterations=1)
    all_rows = sum(getattr(e, "self_device_time_total", 0.0) for e in events) + gemm_us + silu_us
    assert record.total_us == pytest.approx(gemm_us + silu_us + 1.5)
    assert all_rows > 2 * gemm_us  # what summing every row with device time would have given

    by_name = {row.name: row for row in record.rows}
    assert record.ops[by_name[kernel.name].op].name == "aten::addmm"
    assert by_name["Memset (Device)"].op is None
    plan = build_plan(record, model="fake", class_name="Model")
    matmul = types_of(plan)["matmul (linear)"]
    assert matmul.bench_shape == [1, 4096, 4096, 1024] and matmul.call_sites[0].module == "fc"
    assert_shares_add_up(plan)


def test_kernels_fall_back_to_the_ops_torch_attached_them_to() -> None:
    """A torch without linked_correlation_id: kernels are matched to op.kernels by name+time."""
    kernel = SimpleNamespace(name="nvjet_sm90_tst_128x128_64x4_1x1_v_bz_TNT", duration=42.0)
    mm = _fake_event("aten::mm", 0, 10, id=5, input_shapes=[[64, 32], [32, 16]], kernels=[kernel])
    gpu = _fake_event(kernel.name, 20, 62, device="CUDA")
    for evt in (mm, gpu):
        del evt.activity_type, evt.linked_correlation_id
    record = record_from_events([mm, gpu], device="cuda", dtype="fp16", iterations=1)
    assert record.ops[record.rows[0].op].name == "aten::mm"
    assert types_of(build_plan(record, "m", "Model"))["matmul (gemm)"].bench_shape == \
        [1, 64, 16, 32]


# ---------------------------------------------------------------------------------------------
# Recorded GPU profile: nvjet names, the shared layer-norm kernel, unattributed kernels


def test_recorded_h100_rows() -> None:
    record = RecordedProfile.load(H100_EVENTS)
    plan = build_plan(record, model="block", class_name="Model")
    found = types_of(plan)
    assert plan.total_ms == pytest.approx(1.53875)
    # nvjet GEMMs under the linears' aten::addmm / aten::mm, plus one with no op (named by its
    # kernel): its role unknown, it joins the largest matmul target.
    assert [t.label for t in plan.targets].count("matmul (linear)") == 1
    assert not {"matmul (gemm)", "matmul (batched)", "matmul"} & set(found)
    assert found["matmul (linear)"].calls == 4
    assert found["matmul (linear)"].time_ms == pytest.approx((301.25 + 498 + 452.75 + 9.5) / 1000)
    assert found["matmul (linear)"].bench_shape == [1, 4096, 4096, 1024]
    # The same vectorized_layer_norm_kernel serves both; the op decides.
    assert found["rmsnorm"].time_ms == pytest.approx(0.035)
    assert found["rmsnorm"].params == {"eps": 1e-6}
    assert found["layernorm"].time_ms == pytest.approx(0.0415)
    assert found["flash_attention"].params["causal"] is True
    assert found["flash_attention"].bench_shape == [8, 16, 512, 64]
    # aten::gelu is the gelu kernel type's (its op entry's aten_ops), no longer "other".
    assert {o["op"] for o in plan.other_ops} == {"aten::add", "Memset (Device)"}
    assert "gelu" in found
    assert [t.kernel_type for t in plan.targets][0] == "matmul"
    assert plan.gpu == "NVIDIA H100 80GB HBM3"
    assert_shares_add_up(plan)


class _Recorder:
    """Builds a GPU-style RecordedProfile op by op: each op call gets the next id, each kernel
    row hangs off the op that launched it."""

    def __init__(self) -> None:
        self.ops: dict[int, OpCall] = {}
        self.rows: list[TimedRow] = []
        self.calls = {0: ModuleCall(0, ""), 1: ModuleCall(1, "attn"), 2: ModuleCall(2, "mlp")}

    def op(self, name: str, shapes: list[list[int]], args: list | None = None,
           parent: int | None = None, scope: int = 0, kernel_us: float = 0.0) -> int:
        op_id = len(self.ops) + 1
        self.ops[op_id] = OpCall(op_id, name, parent, [0] + ([scope] if scope else []), shapes,
                                 ["c10::Half"] * len(shapes), args or [None] * len(shapes))
        if kernel_us:
            self.rows.append(TimedRow(f"nvjet_sm90_{name[6:]}_{op_id}", kernel_us, op_id))
        return op_id

    def linear(self, tokens: int, n: int, k: int, us: float, scope: int) -> None:
        linear = self.op("aten::linear", [[tokens, k], [n, k], [n]], scope=scope)
        self.op("aten::t", [[n, k]], parent=linear, scope=scope)
        self.op("aten::addmm", [[n], [tokens, k], [k, n]], parent=linear, scope=scope,
                kernel_us=us)

    def matmul(self, a: list[int], b: list[int], b_strides: list[int], us: float) -> None:
        """aten::matmul on 4-D operands, as torch records it: expand (with the operand's strides
        on its as_strided) and reshape of each, then one bmm."""
        matmul = self.op("aten::matmul", [a, b], scope=1)
        for operand, strides in ((a, [a[1] * a[2] * a[3], a[2] * a[3], a[3], 1]), (b, b_strides)):
            expand = self.op("aten::expand", [operand, [], []], [None, operand, False],
                             parent=matmul, scope=1)
            self.op("aten::as_strided", [operand, [], [], []], [None, operand, strides, None],
                    parent=expand, scope=1)
        batch = a[0] * a[1]
        self.op("aten::bmm", [[batch, a[2], a[3]], [batch, b[2], b[3]]], parent=matmul, scope=1,
                kernel_us=us)

    def record(self) -> RecordedProfile:
        return RecordedProfile("cuda", "fp16", 1, self.rows, self.ops, self.calls, {},
                               gpu="NVIDIA H100 80GB HBM3", time_source="device kernels")


def minigpt_record(scores_us: float) -> RecordedProfile:
    """KernelBench level 3's 44_MiniGPTBlock (128 x 512 tokens, d 768, 8 heads of 96) as a GPU
    profile: four linear layers and the attention's two batched products, q @ kᵀ reading kᵀ as a
    transposed view of the fused qkv projection."""
    batch, seq, d, heads = 128, 512, 768, 8
    head_dim, tokens = d // heads, batch * seq
    rec = _Recorder()
    rec.linear(tokens, 3 * d, d, 900.0, scope=1)
    rec.op("aten::split", [[batch, seq, 3 * d], [], []], scope=1)
    rec.op("aten::transpose", [[batch, heads, seq, head_dim], [], []], [None, -2, -1], scope=1)
    k_t_strides = [seq * 3 * d, head_dim, 1, 3 * d]  # k = qkv[..., d:2d].view(...).transpose(1, 2)
    rec.matmul([batch, heads, seq, head_dim], [batch, heads, head_dim, seq], k_t_strides,
               scores_us)
    rec.op("aten::eq", [[1, 1, seq, seq], []], scope=1, kernel_us=20.0)
    rec.op("aten::masked_fill", [[batch, heads, seq, seq], [1, 1, seq, seq], []], scope=1,
           kernel_us=300.0)
    rec.op("aten::softmax", [[batch, heads, seq, seq], [], []], [None, -1, None], scope=1,
           kernel_us=400.0)
    v_strides = [seq * 3 * d, head_dim, 3 * d, 1]
    rec.matmul([batch, heads, seq, seq], [batch, heads, seq, head_dim], v_strides, 500.0)
    rec.linear(tokens, d, d, 300.0, scope=1)
    rec.linear(tokens, 4 * d, d, 1150.0, scope=2)
    rec.linear(tokens, d, 4 * d, 1100.0, scope=2)
    return rec.record()


@pytest.mark.parametrize("scores_us", [700.0, 2000.0], ids=["scores_light", "scores_heavy"])
def test_minigpt_block_gets_a_target_per_matmul_role(scores_us: float) -> None:
    """The attention-score bmm at 512x512x96 is the batched target's primary shape, with its
    batch and Kᵀ layout; the linear layers that hold the time are a target of their own, timed
    at 65536x3072x768 — however heavy the scores product is."""
    plan = build_plan(minigpt_record(scores_us), model="44_MiniGPTBlock", class_name="Model")
    found = types_of(plan)
    linear, batched = found["matmul (linear)"], found["matmul (batched)"]
    assert linear.bench_shape == [1, 65536, 3072, 768] and linear.calls == 4 and \
        linear.params == {}
    assert linear.time_ms == pytest.approx((900 + 300 + 1150 + 1100) / 1000)
    assert batched.shapes == [[1024, 512, 512, 96], [1024, 512, 96, 512]]
    assert batched.params == {"b_transposed": True} and batched.calls == 2
    assert batched.call_sites[-1].params == {}  # P @ V reads V as it is
    assert {s.module for s in batched.call_sites} == {"attn"}
    assert plan.targets[0].label == "matmul (linear)"  # 3.45 ms of linears either way
    assert "flash_attention" not in found and found["softmax"].bench_shape == [512 * 1024, 512]
    assert_shares_add_up(plan)


def test_bmm_of_a_transposed_view_is_timed_transposed() -> None:
    """torch.bmm(a, b.transpose(1, 2)) has no expand to read strides from; the transpose just
    before it in program order says B is a transposed view."""
    rec = _Recorder()
    rec.op("aten::transpose", [[6, 40, 48], [], []], [None, 1, 2], scope=1)
    rec.op("aten::bmm", [[6, 32, 48], [6, 48, 40]], scope=1, kernel_us=10.0)
    rec.op("aten::transpose", [[6, 48, 40], [], []], [None, 0, 1], scope=1)  # not B's last dims
    rec.op("aten::bmm", [[40, 32, 6], [40, 6, 48]], scope=1, kernel_us=5.0)
    batched = types_of(build_plan(rec.record(), "m", "Model"))["matmul (batched)"]
    assert {tuple(s.shape): s.params for s in batched.call_sites} == {
        (6, 32, 40, 48): {"b_transposed": True}, (40, 32, 48, 6): {}}


def test_gemm_kernels_without_an_op_join_the_largest_matmul_target() -> None:
    rec = _Recorder()
    rec.rows.append(TimedRow("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", 3.0, None))
    alone = build_plan(rec.record(), "m", "Model")
    assert [(t.label, t.bench_shape) for t in alone.targets] == [("matmul", [])]
    rec.op("aten::bmm", [[6, 32, 48], [6, 48, 40]], scope=1, kernel_us=10.0)
    rec.linear(64, 32, 16, 4.0, scope=2)
    joined = types_of(build_plan(rec.record(), "m", "Model"))
    assert joined["matmul (batched)"].calls == 2 and joined["matmul (linear)"].calls == 1
    assert joined["matmul (batched)"].time_ms == pytest.approx(13.0 / 1000)


def test_ceiling_with_no_other_time_is_unbounded(capsys: pytest.CaptureFixture[str]) -> None:
    """Shares of 4/6, 1/6 and 1/6 add up to 0.9999999999999999 in floating point; with no
    "other" time the last ceiling is unbounded (None, printed "∞"), not 1 / 1.1e-16 =
    9007199254740992x."""
    rec = _Recorder()
    rec.op("aten::_scaled_dot_product_flash_attention", [[2, 4, 64, 32]] * 3,
           [None, None, None, 0.0, True, False, None], scope=1, kernel_us=4.0)
    rec.op("aten::layer_norm", [[128, 64], [], [64], [64], []], [None, [64], None, None, 1e-5],
           scope=2, kernel_us=1.0)
    rec.op("aten::softmax", [[128, 64], [], []], [None, -1, None], scope=2, kernel_us=1.0)
    plan = build_plan(rec.record(), "97_attention", "Model")
    assert plan.other_ms == 0 and len(plan.targets) == 3
    assert sum(t.share for t in plan.targets) < 1.0  # the rounding that caused the bug
    assert [t.cumulative_limit for t in plan.targets] == [pytest.approx(3.0),
                                                           pytest.approx(6.0), None]
    rows = plan_rows(plan)
    assert [row[-1] for row in rows[:3]] == ["3.00×", "6.00×", "∞"]
    text = format_markdown(plan)
    assert "9007199254740992" not in text and "| ∞ |" in text
    print_plan(plan)  # the CLI's table
    printed = capsys.readouterr().out
    assert "9007199254740992" not in printed and "∞" in printed
    assert amdahl_speedup(1.0, float("inf")) == float("inf")
    assert amdahl_speedup(0.9999999999999999, float("inf")) == float("inf")


@pytest.mark.parametrize("name, expected", [
    ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "matmul"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "matmul"),
    ("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align8", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64",
     "flash_attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>",
     "flash_attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, true>",
     None),
    ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", None),
])
def test_kernel_names_alone(name: str, expected: str | None) -> None:
    assert classify_kernel_name(name) == expected


def test_real_recordings() -> None:
    """Profiles recorded on a GPU by `python -m autokernel.benchmarks profiles
    --record-fixtures`, held to the same expectations as the live GPU run: cuBLAS's nvjet
    kernels counted as matmul."""
    if not RECORDED:
        pytest.skip("no GPU recordings in tests/fixtures/recorded/ yet")
    for path in RECORDED:
        record = RecordedProfile.load(path)
        assert any(row.name.startswith("nvjet") for row in record.rows), path
        plan = build_plan(record, model=path.stem, class_name="Model")
        assert_shares_add_up(plan)
        model = path.stem.rsplit("_", 1)[0]  # <model>_<dtype>.json
        verdict = PROFILE_EXAMPLES.check(model, 0.0, plan)
        assert not verdict.problems, (path, verdict.problems)


def test_classification_is_a_pure_function_of_the_record(tmp_path: Path) -> None:
    record = RecordedProfile.load(H100_EVENTS)
    record.save(tmp_path / "again.json")
    again = RecordedProfile.load(tmp_path / "again.json")
    assert classify_profile(again) == classify_profile(record)


# ---------------------------------------------------------------------------------------------
# Amdahl and the plan file


def test_amdahl_figures() -> None:
    record = RecordedProfile.load(H100_EVENTS)
    plan = build_plan(record, model="block", class_name="Model")
    cumulative = 0.0
    for target in plan.targets:
        cumulative += target.share
        assert target.amdahl_2x == pytest.approx(1 / (1 - target.share / 2))
        assert target.cumulative_2x == pytest.approx(1 / (1 - cumulative / 2))
        assert target.cumulative_limit == pytest.approx(1 / (1 - cumulative))
    shares = [t.share for t in plan.targets]
    assert shares == sorted(shares, reverse=True)
    assert amdahl_speedup(1.0) == pytest.approx(2.0) and amdahl_speedup(0.0) == 1.0


def test_plan_json_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    trace = tmp_path / "trace.json"
    events = tmp_path / "events.json"
    result = runner.invoke(app, ["profile", str(MODELS / "swiglu.py"), "--device", "cpu",
                                 "--warmup", "1", "--iters", "2", "--json", str(out),
                                 "--trace", str(trace), "--events", str(events)])
    assert result.exit_code == 0, result.output
    assert "fused_mlp" in result.output
    data = json.loads(out.read_text())
    for target in data["targets"]:
        for key in ("rank", "kernel_type", "shapes", "dtype", "calls", "time_ms", "share"):
            assert key in target
        assert 0.0 <= target["share"] <= 1.0
    plan = Plan.load(out)
    assert plan.to_dict() == data
    assert plan.targets[0].call_sites[0].shape == [48, 64, 160]
    assert "traceEvents" in json.loads(trace.read_text())
    replayed = build_plan(RecordedProfile.load(events), model=plan.model, class_name="Model",
                          warmup=1)
    assert replayed.to_dict() == data


def test_markdown_rendering_lists_every_target_and_other() -> None:
    plan = build_plan(RecordedProfile.load(H100_EVENTS), model="block", class_name="Model")
    text = format_markdown(plan)
    for target in plan.targets:
        assert f"| {target.rank} | {target.label} |" in text
    assert "| other |" in text and "NVIDIA H100" in text


# ---------------------------------------------------------------------------------------------
# The loader


def test_loader_casts_floats_and_keeps_token_ids() -> None:
    loaded = load_model_file(EXAMPLES / "tiny_llama.py", dtype="bf16", device="cpu")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    (ids,) = loaded.inputs
    assert ids.dtype == torch.int64 and int(ids.max()) < 256
    assert not loaded.model.training
    mixed = load_model_file(MODELS / "cross_entropy.py", dtype="fp16", device="cpu",
                            check_forward=False)
    assert [t.dtype for t in mixed.inputs] == [torch.float16, torch.int64]


def test_loader_is_deterministic() -> None:
    a = load_model_file(MODELS / "swiglu.py", device="cpu")
    b = load_model_file(MODELS / "swiglu.py", device="cpu")
    assert torch.equal(a.model.mlp.gate.weight, b.model.mlp.gate.weight)
    assert torch.equal(a.inputs[0], b.inputs[0])
    assert torch.equal(run_forward(a), run_forward(b))


def test_loader_class_name(tmp_path: Path) -> None:
    loaded = load_model_file(MODELS / "no_model.py", class_name="Encoder", device="cpu")
    assert loaded.class_name == "Encoder"
    with pytest.raises(ModelLoadError, match="no nn.Module class 'Decoder'.*found: Encoder"):
        load_model_file(MODELS / "no_model.py", class_name="Decoder", device="cpu")


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "llama_7b_layers", "tiny_llama"])
def test_example_models_are_valid(name: str) -> None:
    """Every example builds and runs its forward on its own inputs (on the meta device: shapes
    and dtypes only, so GPT-2 and the 7B layers cost nothing), with token ids inside the vocab."""
    loaded = load_model_file(EXAMPLES / f"{name}.py", dtype="fp16", device="meta")
    (ids,) = loaded.inputs
    assert ids.dtype == torch.int64
    cpu_ids = import_model_file(EXAMPLES / f"{name}.py").get_inputs()[0]
    vocab = loaded.model.lm_head.out_features if hasattr(loaded.model, "lm_head") else (
        loaded.model.word_embeddings.num_embeddings)
    assert 0 <= int(cpu_ids.min()) and int(cpu_ids.max()) < vocab
    out = run_forward(loaded)
    assert out.shape[:2] == ids.shape and out.dtype == torch.float16


# ---------------------------------------------------------------------------------------------
# Bad input through the CLI: one line, exit 2, no traceback

BAD_INPUTS = [
    ("missing", ["profile", str(MODELS / "does_not_exist.py")], "not found"),
    ("syntax", ["profile", str(MODELS / "syntax_error.py")], "syntax error in .* line 7"),
    ("no_model", ["profile", str(MODELS / "no_model.py")], "no nn.Module class 'Model'"),
    ("bad_class_name", ["profile", str(MODELS / "swiglu.py"), "--class-name", "Nope"],
     "no nn.Module class 'Nope'"),
    ("get_inputs_raises", ["profile", str(MODELS / "get_inputs_raises.py")],
     r"get_inputs\(\) .* raised RuntimeError: dataset not found"),
    ("inputs_mismatch", ["profile", str(MODELS / "inputs_mismatch.py")],
     "do not fit Model.forward"),
    ("bad_dtype", ["profile", str(MODELS / "swiglu.py"), "--dtype", "fp8"], "unknown dtype"),
    ("bad_iters", ["profile", str(MODELS / "swiglu.py"), "--iters", "0"], "--iters"),
]


@pytest.mark.parametrize("case, argv, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(case: str, argv: list[str], message: str) -> None:
    result = runner.invoke(app, [*argv, "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("error:")
    assert re.search(message, text), text
    assert "second line" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_gpu_is_exit_2() -> None:
    result = runner.invoke(app, ["profile", str(MODELS / "swiglu.py"), "--device", "cuda"])
    assert result.exit_code == 2
    assert "no CUDA GPU" in result.output and len(result.output.strip().splitlines()) == 1


def test_no_target_model_exits_0_with_message() -> None:
    result = runner.invoke(app, ["profile", str(MODELS / "no_target.py"), "--device", "cpu",
                                 "--warmup", "0", "--iters", "1"])
    assert result.exit_code == 0, result.output
    assert "no optimizable kernel" in result.output


def test_bad_input_in_a_real_process_prints_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "autokernel", "profile", str(MODELS / "inputs_mismatch.py"),
         "--device", "cpu"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "do not fit" in error_lines[0]


# ---------------------------------------------------------------------------------------------
# On a GPU


# The `profiles` benchmark, whose per-model expectations this test shares.
import autokernel.benchmarks.profile_examples as PROFILE_EXAMPLES  # noqa: E402, N812


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(PROFILE_EXAMPLES.EXPECTATIONS))
def test_examples_on_gpu(name: str) -> None:
    """Time limit, shares, rank 1, the architecture's kernels found and none misfiled."""
    start = time.perf_counter()
    loaded = load_model_file(EXAMPLES / f"{name}.py", dtype="fp16", device="cuda")
    record = profile_model(loaded, warmup=3, iters=5)
    plan = build_plan(record, model=name, class_name="Model", warmup=3)
    verdict = PROFILE_EXAMPLES.check(name, time.perf_counter() - start, plan)
    assert not verdict.problems, verdict.problems
    assert_shares_add_up(plan)


# ---------------------------------------------------------------------------------------------
# Will verify be able to splice each target in? ("verify splices")

ROUTES = [
    ("matmul_mixed", {"matmul (linear)": "module", "matmul (gemm)": "call",
                      "matmul (batched)": "call"}),
    ("sdpa", {"flash_attention": "call"}),
    ("explicit_attention", {"flash_attention": "call chain"}),
    ("explicit_attention_where", {"flash_attention": "call chain"}),
    ("attention_matmuls", {"matmul (linear)": "module", "flash_attention": "call chain"}),
    # The tanh GELU written out as a module's whole forward: routed after a probe.
    ("minigpt_lambda", {"matmul (linear)": "module", "flash_attention": "call chain",
                        "gelu": "module",
                        "layernorm": "module", "add_layernorm": "call chain"}),
    ("swiglu", {"fused_mlp": "module"}),
    ("gated_gelu_mlp", {"fused_mlp": "module"}),
    # Two activations: the kernel is verified with the hotter MLP's, and verify refuses the other.
    ("mixed_gated_mlps", {"fused_mlp": "part: module; no: activation="}),
    # Two eps: the kernel is verified with the hotter module's, and verify refuses the other.
    ("rmsnorm_handwritten", {"rmsnorm": "part: module; no: eps="}),
    ("rmsnorm_builtin", {"rmsnorm": "part: module; no: F.rms_norm outside nn.RMSNorm"}),
    ("layernorm", {"layernorm": "part: module; no: written out (only nn.LayerNorm is routed)"}),
    # A residual add deferred into the norm it feeds, nn.RMSNorm and a hand-written one alike.
    ("add_rmsnorm", {"add_rmsnorm": "call chain", "matmul (linear)": "module"}),
    # nn.LayerNorm pairs are; F.layer_norm outside a module is not.
    ("add_layernorm", {"add_layernorm": "part: call chain; no: F.layer_norm outside nn.LayerNorm",
                       "layernorm": "module", "matmul (linear)": "module"}),
    ("cross_entropy", {"cross_entropy": "call"}),
    # The head's F.linear deferred into the loss of its (shifted, cast) output.
    ("linear_cross_entropy", {"linear_cross_entropy": "call chain", "layernorm": "module"}),
    ("log_softmax_nll", {"cross_entropy": "no: log_softmax + nll_loss written out (only "
                                          "F.cross_entropy is routed)"}),
    ("rope_inline", {"rotary_embedding": "function?"}),
    ("rope_function", {"rotary_embedding": "function?", "flash_attention": "call",
                       "matmul (linear)": "module"}),
]


@pytest.mark.parametrize("name, expected", ROUTES, ids=[r[0] for r in ROUTES])
def test_the_plan_says_how_verify_would_splice_each_target(name: str,
                                                           expected: dict[str, str]) -> None:
    plan = cpu_plan(name)
    routes = {t.label: t.route for t in plan.targets}
    assert routes.keys() == expected.keys()
    for label, route in expected.items():
        # An expected route ending in "=" names a value that depends on which site ran hotter.
        assert routes[label].startswith(route) if route.endswith("=") else \
            routes[label] == route, (label, routes[label])
    for target in plan.targets:
        assert all(site.route for site in target.call_sites)
    row = {r[1]: r for r in plan_rows(plan)}
    column = PLAN_COLUMNS.index("verify splices")
    assert all(row[label][column] == routes[label] for label in expected)


def test_sdpa_with_a_mask_or_fewer_kv_heads_is_not_routable() -> None:
    rec = _Recorder()
    rec.op("aten::scaled_dot_product_attention", [[2, 4, 64, 32], [2, 4, 64, 32],
                                                   [2, 4, 64, 32], [2, 1, 64, 64]],
           [None, None, None, None, 0.0, False, None], scope=1, kernel_us=4.0)
    rec.op("aten::scaled_dot_product_attention", [[2, 8, 64, 32], [2, 2, 64, 32],
                                                   [2, 2, 64, 32]],
           [None, None, None, None, 0.0, True, None], scope=2, kernel_us=3.0)
    rec.op("aten::linear", [[128, 64], [64, 64]], scope=2, kernel_us=1.0)  # no module recorded
    plan = build_plan(rec.record(), "masked", "Model")
    found = types_of(plan)
    routes = {site.module: site.route for site in found["flash_attention"].call_sites}
    assert routes == {"attn": "no: attn_mask", "mlp": "no: k/v heads differ from q's"}
    assert found["flash_attention"].route == "no: attn_mask"
    assert found["matmul (linear)"].route == "?"  # the profile did not record its module
    text = format_markdown(plan)
    assert "Not spliced in by `autokernel verify`: #1 flash_attention: attn (no: attn_mask), " \
           "mlp (no: k/v heads differ from q's)" in text


CONSISTENCY = ["matmul_mixed", "explicit_attention", "explicit_attention_where",
               "attention_matmuls", "minigpt_lambda", "swiglu", "gated_gelu_mlp",
               "mixed_gated_mlps", "rmsnorm_builtin",
               "rmsnorm_handwritten", "add_rmsnorm", "add_layernorm",
               "log_softmax_nll", "rope_inline", "rope_function", "cross_entropy", "softmax",
               "linear_cross_entropy"]


@pytest.mark.parametrize("name", CONSISTENCY)
def test_what_the_plan_says_is_what_verify_routes(name: str, tmp_path: Path) -> None:
    """Each target's kernel (the starter, from a finished run's manifest) spliced into the model:
    a target the plan calls routable takes every profiled call, a "no" none, a "part" some."""
    run, plan = fabricate_run(MODELS / f"{name}.py", tmp_path / "run")
    kernels = autokernel_package.load(run, device="cpu")
    loaded = load_model_file(MODELS / f"{name}.py", device="cpu")
    expected = run_forward(loaded)
    patch = kernels.patch(loaded.model)
    try:
        routed = run_forward(loaded)
    finally:
        patch.unpatch()
    for a, b in zip(routed if isinstance(routed, tuple) else (routed,),
                    expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    stats = {s.tag: s for s in patch.report.kernels.values()}
    for state, target in zip(run_state_targets(run), plan.targets):
        calls = stats[state].calls
        if target.route.startswith("no"):
            assert calls == 0, (target.label, target.route)
        elif target.route.startswith("part"):
            assert 0 < calls < target.calls, (target.label, target.route, calls)
        elif target.route != "function?":
            assert calls == target.calls, (target.label, target.route, calls)
    if name == "rope_inline":
        assert stats["01_rotary_embedding"].calls == 0  # written inline: no call to route
    if name == "rope_function":
        assert next(s for s in stats.values() if s.kernel_type == "rotary_embedding").calls == 4


def run_state_targets(run: Path) -> list[str]:
    state = json.loads((run / "state.json").read_text())
    return [t["tag"] for t in state["targets"]]


def test_kineto_chatter_is_dropped_and_everything_else_on_stderr_passes(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import os

    from autokernel.profiling.profiler import without_profiler_chatter

    with without_profiler_chatter():
        os.write(2, b"USDT:2026-11-25 12:00:00 1:1 SyncActivityProfilerHandler.cpp:52] "
                    b"profiler_start\n")
        os.write(2, b"a warning of the model's own\n")
    assert capfd.readouterr().err == "a warning of the model's own\n"
