"""Reduce, rmsnorm and softmax over a dim that is not the last (issue 13): the profiler files them
under their kernel type with an (M, N, K) shape and an `axis` param, the harness checks a starter
at those shapes, and a kernel verified over an axis is routed for such calls (a kernel verified
over the last dim is not)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from autokernel.harness.cases import default_timing_shapes, plan_cases
from autokernel.integrate.patch import patch_model
from autokernel.ops import get_spec
from conftest import DEVICE
from test_patch import build, entry

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "kernelbench"


def _profile(tmp_path: Path, problem: str, inputs: str, init: str = "[]"):
    """The plan of a shipped KernelBench-style problem at a tiny input size."""
    from autokernel.profiling.model_loader import load_model_file
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan

    path = tmp_path / f"tiny_{problem}.py"
    path.write_text(textwrap.dedent(f"""\
        import importlib.util
        import torch
        _spec = importlib.util.spec_from_file_location("problem", {str(EXAMPLES / problem)!r})
        _problem = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_problem)
        Model = _problem.Model

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return {init}
        """))
    loaded = load_model_file(path, device="cpu")
    return build_plan(profile_model(loaded, warmup=1, iters=1), model=str(path),
                      class_name="Model")


# ---------------------------------------------------------------------------------------------
# reduce: x.sum(dim=1)


def test_a_sum_over_dim_1_is_a_reduce_target_with_its_axis(tmp_path: Path) -> None:
    plan = _profile(tmp_path, "04_sum_over_dim1.py", "torch.randn(2, 512, 64)")
    (target,) = plan.targets
    assert target.kernel_type == "reduce" and target.params == {"axis": 1}
    assert target.bench_shape == [2, 512, 64] and target.dims == ["M", "N", "K"]
    assert target.call_sites[0].route == "call"


def test_the_harness_checks_an_axis_target_at_axis_shapes_and_a_last_dim_one_without() -> None:
    spec = get_spec("reduce")
    dtypes = [torch.float32]
    axis_cases = plan_cases(spec, "cpu", dtypes, [(2, 300, 33)], [(2, 512, 64)])
    swept = {c.shape for c in axis_cases if c.stage in ("shape_sweep", "edge_sizes")}
    assert {(3, 40, 5), (2, 1537, 3), (2, 512, 64)} <= swept
    assert any(len(s) == 2 for s in swept)  # and over the last dim too
    last_dim_cases = plan_cases(spec, "cpu", dtypes, default_timing_shapes(spec, "cpu"), [])
    assert all(spec.inner(c.shape) == 1 for c in last_dim_cases)


class ChannelSums(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.sum(dim=1, keepdim=True), torch.sum(x, 1), x.sum(-1), x.sum((0, 1))


@pytest.mark.slow
def test_a_reduce_kernel_verified_over_an_axis_takes_sums_over_dim_1() -> None:
    (kernel,) = build(entry("reduce", params={"axis": 1}))
    model = ChannelSums()
    x = torch.randn(2, 40, 6, 3, device=DEVICE)
    reference = model(x)
    patch = patch_model(model, [kernel])
    routed = model(x)
    for a, b in zip(routed, reference):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 3 and stats.fallbacks == {"not over one dim": 1}

    leaf = x.clone().requires_grad_(True)
    model(leaf)[0].square().sum().backward()
    expected = (2 * x.sum(1, keepdim=True)).expand_as(x)
    torch.testing.assert_close(leaf.grad, expected, atol=1e-4, rtol=1e-4)


def test_a_last_dim_reduce_kernel_leaves_sums_over_dim_1_with_a_reason() -> None:
    (kernel,) = build(entry("reduce"))
    model = ChannelSums()
    patch = patch_model(model, [kernel])
    model(torch.randn(2, 40, 6, device=DEVICE))
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 1
    assert stats.fallbacks["over dim 1 of 3; the kernel was verified over the last dim only"] == 2


def test_old_kernel_files_without_the_axis_argument_still_run_over_the_last_dim(
        tmp_path: Path) -> None:
    from autokernel.integrate.custom_ops import register_kernel
    from autokernel.ops import get_integration
    from autokernel.reference import REFERENCES

    def old_kernel_fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)

    op = register_kernel("reduce", old_kernel_fn, "def kernel_fn(x): ...  # test_axis_ops",
                         get_integration("reduce"), REFERENCES["reduce"])
    x = torch.randn(3, 5, device=DEVICE)
    torch.testing.assert_close(op.op(x), x.sum(-1))
    torch.testing.assert_close(op.direct(x), x.sum(-1))
    with pytest.raises(ValueError, match="not an axis"):
        op.direct(x.view(3, 5, 1), 1)


# ---------------------------------------------------------------------------------------------
# rmsnorm: x / sqrt(mean(x * x, dim=1, keepdim=True) + eps) on NCHW (KernelBench 36)


def _nchw_rmsnorm_model() -> nn.Module:
    from autokernel.profiling.model_loader import import_model_file

    return import_model_file(EXAMPLES / "06_rmsnorm_nchw.py").Model(1e-5)


def test_a_composite_rmsnorm_over_channels_is_an_rmsnorm_target_with_its_axis(
        tmp_path: Path) -> None:
    plan = _profile(tmp_path, "06_rmsnorm_nchw.py", "torch.randn(2, 8, 16, 16)", "[1e-5]")
    (target,) = plan.targets
    assert target.kernel_type == "rmsnorm" and target.params == {"axis": 1, "eps": 1e-5}
    assert target.bench_shape == [2, 8, 256]
    (site,) = target.call_sites
    # "norm": "module": the graph saw the norm as a module's whole forward (what routes it).
    assert site.notes == {"elementwise_affine": False, "norm": "module"}
    assert site.route == "module"


def test_an_rmsnorm_kernel_verified_over_an_axis_takes_the_weightless_module() -> None:
    (kernel,) = build(entry("rmsnorm", params={"eps": 1e-5, "axis": 1}))
    model = _nchw_rmsnorm_model()
    x = torch.randn(2, 8, 5, 3, device=DEVICE)
    reference = model(x)
    patch = patch_model(model, [kernel])
    routed = model(x)
    torch.testing.assert_close(routed, reference, atol=1e-4, rtol=1e-4)
    (stats,) = patch.report.kernels.values()
    assert stats.modules == [""] and stats.calls == 1 and not stats.fallbacks

    leaf = x.clone().requires_grad_(True)
    model(leaf).square().sum().backward()
    expected_leaf = x.clone().requires_grad_(True)
    patch.unpatch()
    model(expected_leaf).square().sum().backward()
    torch.testing.assert_close(leaf.grad, expected_leaf.grad, atol=1e-4, rtol=1e-4)


def test_a_last_dim_rmsnorm_kernel_refuses_the_channel_norm_after_its_probe() -> None:
    (kernel,) = build(entry("rmsnorm", params={"eps": 1e-5}))
    patch = patch_model(_nchw_rmsnorm_model(), [kernel])
    (stats,) = patch.report.kernels.values()
    assert stats.modules == [] and "over the last dim" in stats.skipped[""]


# ---------------------------------------------------------------------------------------------
# softmax over dim 1


class ChannelSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.softmax(x, dim=1), x.softmax(-1)


def test_a_softmax_over_dim_1_is_a_softmax_target_with_its_axis(tmp_path: Path) -> None:
    path = tmp_path / "channel_softmax.py"
    path.write_text(textwrap.dedent("""\
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=1)

        def get_inputs():
            return [torch.randn(2, 16, 4, 8)]
        """))
    from autokernel.profiling.model_loader import load_model_file
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan

    plan = build_plan(profile_model(load_model_file(path, device="cpu"), warmup=1, iters=1),
                      model=str(path), class_name="Model")
    (target,) = plan.targets
    assert target.kernel_type == "softmax" and target.params == {"axis": 1}
    assert target.bench_shape == [2, 16, 32]


def test_a_softmax_kernel_verified_over_an_axis_takes_softmax_over_dim_1() -> None:
    (kernel,) = build(entry("softmax", params={"axis": 1}))
    model = ChannelSoftmax()
    x = torch.randn(2, 9, 5, 3, device=DEVICE)
    reference = model(x)
    patch = patch_model(model, [kernel])
    for a, b in zip(model(x), reference):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 2 and not stats.fallbacks

    weights = torch.arange(x.numel(), device=DEVICE).view_as(x)
    leaf = x.clone().requires_grad_(True)
    (model(leaf)[0] * weights).sum().backward()
    expected_leaf = x.clone().requires_grad_(True)
    (torch.softmax(expected_leaf, 1) * weights).sum().backward()
    torch.testing.assert_close(leaf.grad, expected_leaf.grad, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# reduce's params.op: torch.mean and amax over a dim are reduce targets of their own


@pytest.mark.parametrize("problem, inputs, op", [
    ("13_mean_over_dim1.py", "torch.randn(2, 512, 64)", "mean"),
    ("14_amax_over_dim1.py", "torch.randn(2, 512, 64)", "amax"),
])
def test_a_mean_or_amax_over_dim_1_is_a_reduce_target_of_its_op(
        tmp_path: Path, problem: str, inputs: str, op: str) -> None:
    plan = _profile(tmp_path, problem, inputs)
    (target,) = plan.targets
    assert target.kernel_type == "reduce" and target.role == op
    assert target.params == {"axis": 1, "op": op} and target.bench_shape == [2, 512, 64]
    assert target.call_sites[0].route == "call"
    assert plan.other_share < 0.5  # the reduction is the model's time, not "other"


class ChannelStatistics(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.mean(x, dim=1), x.mean(-1, keepdim=True), x.amax(dim=1, keepdim=True),
                torch.amax(x, -1), x.sum(1), x.mean((0, 1)), x.amax())


@pytest.mark.slow
def test_mean_and_amax_kernels_take_only_their_own_op_over_any_dim() -> None:
    mean, amax = build(entry("reduce", "mean", {"axis": 1, "op": "mean"}, tag="01_mean"),
                       entry("reduce", "amax", {"axis": 1, "op": "amax"}, tag="02_amax"))
    model = ChannelStatistics()
    x = torch.randn(2, 40, 6, 3, device=DEVICE)
    reference = model(x)
    patch = patch_model(model, [mean, amax])
    for a, b in zip(model(x), reference):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    stats = patch.report.kernels
    assert stats["01_mean"].calls == 2 and stats["01_mean"].fallbacks == {"not over one dim": 1}
    assert stats["02_amax"].calls == 2 and stats["02_amax"].fallbacks == {"not over one dim": 1}

    leaf = x.clone().requires_grad_(True)
    outputs = model(leaf)
    (outputs[0].square().sum() + outputs[2].sum()).backward()
    expected_leaf = x.clone().requires_grad_(True)
    patch.unpatch()
    outputs = model(expected_leaf)
    (outputs[0].square().sum() + outputs[2].sum()).backward()
    torch.testing.assert_close(leaf.grad, expected_leaf.grad, atol=1e-5, rtol=1e-5)


class MixedSums(nn.Module):
    """One reduce target whose call sites mix the last dim and dim 1."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.sum(-1), y.sum(dim=1)


def test_a_target_mixing_last_dim_and_axis_sites_routes_each_call_over_its_own_dim(
        tmp_path: Path) -> None:
    from autokernel.profiling.model_loader import load_model_file
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan

    path = tmp_path / "mixed_sums.py"
    path.write_text(textwrap.dedent("""\
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x, y):
                return x.sum(-1), y.sum(dim=1)

        def get_inputs():
            return [torch.randn(8, 64, 512), torch.randn(2, 64, 512)]
        """))
    plan = build_plan(profile_model(load_model_file(path, device="cpu"), warmup=1, iters=1),
                      model=str(path), class_name="Model")
    (target,) = plan.targets
    assert {tuple(s.shape) for s in target.call_sites} == {(512, 512), (2, 64, 512)}
    # Its axis shape is checked by the harness, so the plan carries the axis whichever site is
    # hotter, and the kernel is routed for both kinds of call.
    assert target.params == {"axis": 1}

    (kernel,) = build(entry("reduce", params=target.params))
    model = MixedSums()
    x, y = torch.randn(3, 5, 40, device=DEVICE), torch.randn(2, 40, 7, device=DEVICE)
    reference = model(x, y)
    patch = patch_model(model, [kernel])
    for a, b in zip(model(x, y), reference):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 2 and not stats.fallbacks


# ---------------------------------------------------------------------------------------------
# The loop on an axis target, end to end on the interpreter


@pytest.mark.slow
def test_the_loop_tunes_a_sum_over_dim_1_and_its_kernel_routes_the_call(tmp_path: Path) -> None:
    """A KernelBench-style sum over dim 1 of x[4, 32, 16]: a PASS baseline at its axis shape,
    one tuner experiment kept or reverted, and the best kernel takes the model's call."""
    from autokernel.agents.tuner import TunerAgent
    from autokernel.integrate.patch import build_kernels
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.results import ResultsLog, read_rows
    from autokernel.loop.runner import Runner
    from autokernel.loop.state import RunState, TargetState
    from autokernel.loop.workspace import BRANCH_PREFIX, Workspace
    from autokernel.orchestrate import MoveOnConfig
    from autokernel.profiling.plan import CallSite, Plan, Target
    from autokernel.reference import REFERENCES
    from test_patch import integrations

    model_file = tmp_path / "sum_over_dim1.py"
    model_file.write_text(textwrap.dedent("""\
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                return x.sum(dim=1)

        def get_inputs():
            return [torch.randn(4, 32, 16)]

        def get_init_inputs():
            return []
        """))
    target = Target(rank=1, kernel_type="reduce", shapes=[[4, 32, 16]], dtype="fp32", calls=1,
                    time_ms=1.0, share=0.9, bench_shape=[4, 32, 16], amdahl_2x=1.8,
                    cumulative_2x=1.8, params={"axis": 1}, dims=["M", "N", "K"],
                    call_sites=[CallSite("", "aten::sum", [4, 32, 16], "fp32", 1, 1.0,
                                         params={"axis": 1}, route="call")])
    plan = Plan(model=str(model_file), class_name="Model", device="cpu", dtype="fp32", gpu=None,
                total_ms=1.1, targets=[target])
    ws = Workspace.create(tmp_path / "run", run_tag="t", run_info={}, plan_json="{}\n",
                          model_path=model_file, program_md="# playbook\n",
                          reference_source="# oracles\n")
    state = RunState(run_tag="t", branch=BRANCH_PREFIX + "t", head=ws.head(), hours=None,
                     targets=[TargetState(index=0, rank=1, kernel_type="reduce",
                                          tag="01_reduce")])
    ResultsLog.create(ws.results_path)
    config = LoopConfig(device="cpu", dtype="fp32", agent="tuner", hours=None,
                        move_on=MoveOnConfig(max_experiments=1, target_speedup=None),
                        bench_timeout_s=60.0, harness_quick=True, revisit=False)
    assert Runner(ws, plan, state, config, TunerAgent(seed=0)).run() == "every target is done"

    rows = read_rows(ws.results_path)
    assert [r["status"] for r in rows][0] == "baseline" and rows[0]["correctness"] == "PASS"
    assert len(rows) == 2 and rows[1]["status"] in ("keep", "revert", "fail")

    (kernel,) = build_kernels([entry("reduce", params=target.params)],
                              {"01_reduce": ws.read_kernel()}, REFERENCES,
                              integrations([entry("reduce")]), DEVICE, "test_axis_loop")
    model = nn.Module()
    model.forward = lambda x: x.sum(dim=1)  # type: ignore[method-assign]
    x = torch.randn(4, 32, 16, device=DEVICE)
    patch = patch_model(model, [kernel])
    torch.testing.assert_close(model(x), x.sum(dim=1), atol=1e-4, rtol=1e-4)
    (stats,) = patch.report.kernels.values()
    assert stats.calls == 1 and not stats.fallbacks


# ---------------------------------------------------------------------------------------------
# A weighted RMSNorm over NCHW channels: weight [C] broadcast as [1, C, 1, 1]


CHANNEL_NORM = """\
import torch
from torch import nn

class ChannelRMSNorm(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)
        return x / rms * self.weight.view(1, -1, 1, 1)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = ChannelRMSNorm(8)

    def forward(self, x):
        return self.norm(x)

def get_inputs():
    return [torch.randn(2, 8, 16, 16)]
"""


def test_a_weighted_rmsnorm_over_channels_is_profiled_and_routed_over_its_axis(
        tmp_path: Path) -> None:
    from autokernel.profiling.model_loader import import_model_file, load_model_file
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan

    path = tmp_path / "channel_norm.py"
    path.write_text(CHANNEL_NORM)
    plan = build_plan(profile_model(load_model_file(path, device="cpu"), warmup=1, iters=1),
                      model=str(path), class_name="Model")
    (target,) = plan.targets
    assert target.kernel_type == "rmsnorm" and target.params == {"axis": 1, "eps": 1e-5}
    assert target.bench_shape == [2, 8, 256]
    (site,) = target.call_sites
    assert site.notes == {"norm": "module"} and site.route == "module"

    model = import_model_file(path).Model()
    x = torch.randn(2, 8, 5, 3, device=DEVICE)
    model.to(DEVICE)
    reference = model(x)
    (kernel,) = build(entry("rmsnorm", params={"eps": 1e-5, "axis": 1}))
    patch = patch_model(model, [kernel])
    torch.testing.assert_close(model(x), reference, atol=1e-4, rtol=1e-4)
    (stats,) = patch.report.kernels.values()
    assert stats.modules == ["norm"] and stats.calls == 1 and not stats.fallbacks
    patch.unpatch()

    (last_dim,) = build(entry("rmsnorm", params={"eps": 1e-5}, tag="02_rmsnorm"))
    patch = patch_model(model, [last_dim])
    (stats,) = patch.report.kernels.values()
    assert stats.modules == [] and "over the last dim" in stats.skipped["norm"]
