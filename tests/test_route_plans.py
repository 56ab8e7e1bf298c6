"""Routes decide once per call signature and keep the decision (issue 25: host cost near zero).

What makes a routed call cheap is checked as structure, not timed (a loaded CI machine's clock
says little): which code a call on a signature already seen runs, that the plan is made once
per signature and made again when anything it depends on changes (the input's shape, the grad
mode, the module's eps or weight dtype), that nothing is cached under autocast, and what verify
records to time a routed call against its bare launch. The kernels are stubs (PyTorch ops in
place of the kernel's function), so no test here runs the Triton interpreter.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.patch import RoutedKernel, patch_model
from autokernel.integrate.call_recording import recording_calls
from autokernel.integrate.plans import MAX_PLANS, call_signature
from autokernel.integrate.verify import routing_cost_lines, routing_host_cost
from test_patch import build, entry

WIDTH = 8


def stubbed(kernel: RoutedKernel, compute: Any) -> tuple[RoutedKernel, Counter[str]]:
    """The kernel with `compute` as its function (direct, registered op and kernel_fn alike),
    counting each way it was called."""
    calls: Counter[str] = Counter()

    def direct(*args: Any) -> Any:
        calls["direct"] += 1
        calls["mode on" if torch._C._is_torch_function_mode_enabled() else "mode off"] += 1
        return compute(*args)

    def registered(*args: Any) -> Any:
        calls["registered"] += 1
        return compute(*args)

    def kernel_fn(*args: Any) -> Any:
        calls["kernel_fn"] += 1
        return compute(*args)

    op = dataclasses.replace(kernel.op, direct=direct, op=registered, kernel_fn=kernel_fn)
    return dataclasses.replace(kernel, op=op), calls


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, axis: int = -1) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim=axis)


@pytest.fixture(scope="module")
def rmsnorm_kernel() -> RoutedKernel:
    kernel, = build(entry("rmsnorm"))  # verified at eps 1e-5
    return kernel


@pytest.fixture(scope="module")
def softmax_kernel() -> RoutedKernel:
    kernel, = build(entry("softmax", sites=("",)))
    return kernel


class CountedPlans:
    """A route's planner, counted."""

    def __init__(self, route: Any) -> None:
        self.made = 0
        self.plan = route.plan
        route.plan = self

    def __call__(self, *args: Any) -> Any:
        self.made += 1
        return self.plan(*args)


def norm_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.RMSNorm(WIDTH, eps=1e-5)).eval()


def test_a_module_route_plans_once_per_signature(rmsnorm_kernel: RoutedKernel) -> None:
    kernel, calls = stubbed(rmsnorm_kernel, rms_norm)
    model = norm_model()
    patch = patch_model(model, [kernel])
    plans = CountedPlans(model[0].forward)
    x, y = torch.randn(4, WIDTH), torch.randn(2, 3, WIDTH)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model(x), rms_norm(x, model[0].weight, 1e-5))
        assert plans.made == 1 and calls["direct"] == 3
        for _ in range(2):
            torch.testing.assert_close(model(y), rms_norm(y, model[0].weight, 1e-5))
        assert plans.made == 2  # another shape: another plan
        model(x)
        assert plans.made == 2
    out = model(x)  # grad on and a weight that needs it: the registered op, planned again
    assert plans.made == 3 and calls["registered"] == 1 and out.requires_grad
    stats = patch.report.kernels[kernel.tag]
    assert stats.calls == 7 and not stats.fallbacks
    patch.unpatch()


def test_what_a_plan_depends_on_in_the_module_makes_a_new_plan(
        rmsnorm_kernel: RoutedKernel) -> None:
    """eps and the weight's dtype are the module's, not the input's: changed after the first
    plan, they still refuse the call, with the reason, on every call."""
    kernel, calls = stubbed(rmsnorm_kernel, rms_norm)
    model = norm_model()
    patch = patch_model(model, [kernel])
    x = torch.randn(4, WIDTH)
    stats = patch.report.kernels[kernel.tag]
    with torch.no_grad():
        model(x)
        model[0].eps = 1e-3
        for _ in range(2):
            torch.testing.assert_close(model(x), rms_norm(x, model[0].weight, 1e-3))
        assert stats.fallbacks == {"eps=0.001 (verified: 1e-05)": 2}
        model[0].eps = 1e-5
        model[0].half()  # the weight in fp16, the input still fp32
        for _ in range(2):
            model(x)
        assert stats.fallbacks["mixed dtypes"] == 2
    assert stats.calls == 1 and calls["direct"] == 1
    patch.unpatch()


def test_nothing_is_kept_under_autocast(rmsnorm_kernel: RoutedKernel) -> None:
    kernel, calls = stubbed(rmsnorm_kernel, rms_norm)
    model = norm_model()
    patch = patch_model(model, [kernel])
    route = model[0].forward
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            model(torch.randn(4, WIDTH))
    assert route.plans == {} and calls["direct"] == 0
    assert patch.report.kernels[kernel.tag].fallbacks == {"autocast": 2}
    patch.unpatch()


def test_a_seen_signature_runs_no_check_and_few_functions(rmsnorm_kernel: RoutedKernel) -> None:
    """The routed call of a signature already planned: the route's inputs, the signature, the
    lookup, the runner and the kernel. Python calls into autokernel's code are counted
    (sys.setprofile), so a check or binding creeping back into every call shows here."""
    kernel, _ = stubbed(rmsnorm_kernel, rms_norm)
    model = norm_model()
    patch = patch_model(model, [kernel])
    x = torch.randn(4, WIDTH)
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and "/autokernel/" in frame.f_code.co_filename:
            seen.append(frame.f_code.co_name)

    with torch.no_grad():
        model(x)
        sys.setprofile(profile)
        try:
            model(x)
        finally:
            sys.setprofile(None)
    patch.unpatch()
    assert not {"_plan_rmsnorm", "_refusal", "_unverified", "_bind"} & set(seen), seen
    assert "run" in seen and "call_signature" in seen
    # 11 today: _Route.__call__, holds_sum, plain_arguments, _planned, _rmsnorm_inputs,
    # _only_argument, module_attribute, call_signature, run, _call_direct, count_call
    assert len(seen) <= 12, seen


def test_a_call_route_plans_once_and_its_kernel_host_code_sees_no_mode(
        softmax_kernel: RoutedKernel) -> None:
    kernel, calls = stubbed(softmax_kernel, softmax)

    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x, dim=-1) + F.softmax(x, -1)

    model = Model()
    patch = patch_model(model, [kernel])
    (_, _, _, _, plans), = patch.router.routes[torch.softmax]
    x = torch.randn(3, WIDTH)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model(x), 2 * torch.softmax(x, dim=-1))
    # one plan per function and spelling: torch.softmax(x, dim=-1), F.softmax(x, -1)
    assert len(plans) == 2 and calls["direct"] == 6
    assert calls["mode off"] == 6  # the Router's mode is popped for its handler
    assert patch.report.kernels[kernel.tag].calls == 6
    patch.unpatch()


def test_a_signature_tells_apart_what_a_route_tells_apart() -> None:
    x = torch.randn(2, 3)
    assert call_signature((x, 1)) != call_signature((x, True))
    assert call_signature((x, 1)) != call_signature((x, 1.0))
    assert call_signature((x, (1,))) != call_signature((x, [1]))
    assert call_signature((x,), {"dim": 1}) != call_signature((x, 1))
    assert call_signature((x,)) != call_signature((x.t(),))  # strides
    assert call_signature((x,)) != call_signature((x.double(),))
    grad_on = call_signature((x,))
    with torch.no_grad():
        assert call_signature((x,)) != grad_on  # the grad mode
    assert call_signature((torch.randn(2, 3),)) == call_signature((torch.randn(2, 3),))

    class Sub(torch.Tensor):
        pass

    assert call_signature((x.as_subclass(Sub),)) is None  # planned per call, as before
    assert call_signature((x.to_sparse(),)) != call_signature((x,))  # strides (0, 0)
    assert call_signature((x.to_sparse_csr(),)) is None  # no strides at all
    assert call_signature((x, object())) is None


def test_plans_are_kept_up_to_a_bound(rmsnorm_kernel: RoutedKernel) -> None:
    kernel, calls = stubbed(rmsnorm_kernel, rms_norm)
    model = norm_model()
    patch = patch_model(model, [kernel])
    with torch.no_grad():
        for rows in range(1, MAX_PLANS + 5):
            model(torch.randn(rows, WIDTH))
    assert len(model[0].forward.plans) == MAX_PLANS
    assert calls["direct"] == MAX_PLANS + 4  # the rest planned per call, still routed
    patch.unpatch()


def test_verify_records_each_kernels_routed_call_and_its_bare_launch(
        rmsnorm_kernel: RoutedKernel, softmax_kernel: RoutedKernel) -> None:
    norm, norm_calls = stubbed(rmsnorm_kernel, rms_norm)
    soft, soft_calls = stubbed(softmax_kernel, softmax)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.RMSNorm(WIDTH, eps=1e-5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.norm(x), dim=-1)

    model = Model().eval()
    patch = patch_model(model, [norm, soft])
    x = torch.randn(3, WIDTH)
    with torch.no_grad():
        with recording_calls() as recorded:
            model(x)
            model(x)  # the first routed call of each kernel is the one kept
        assert set(recorded.routed) == set(recorded.bare) == {norm.tag, soft.tag}
        patch.report.reset_counts()
        recorded.routed[norm.tag]()
        recorded.routed[soft.tag]()
        assert {tag: s.calls for tag, s in patch.report.kernels.items()} == \
            {norm.tag: 1, soft.tag: 1}  # each replay is one routed call, through its route
        kernel_fn_calls = norm_calls["kernel_fn"], soft_calls["kernel_fn"]
        recorded.bare[norm.tag]()
        recorded.bare[soft.tag]()
        assert (norm_calls["kernel_fn"], soft_calls["kernel_fn"]) == \
            (kernel_fn_calls[0] + 1, kernel_fn_calls[1] + 1)
    patch.unpatch()
    assert routing_host_cost(recorded, torch.device("cpu")) == {}  # a GPU figure only
    line, = routing_cost_lines({"01_rmsnorm": {"routed_us": 14.0, "bare_us": 9.5,
                                               "routing_us": 4.5},
                                "02_softmax": {"routed_us": 30.0, "bare_us": 8.0,
                                               "routing_us": 22.0}})
    assert "01_rmsnorm +4.5 µs" in line and line.endswith("over 10 µs: 02_softmax")
