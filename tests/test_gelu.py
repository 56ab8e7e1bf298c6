"""gelu, the kernel type added by its op entry, starter and tests alone: the starter against the
reference, the profiler's classification, routing into a model, and the exported section."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE
from starter_checks import (
    assert_adversarial_case_passes, assert_matches_reference, load_starter, seeded_inputs,
)
from test_patch import build, entry
from torch import nn

from autokernel.integrate.export import integration_section
from autokernel.integrate.patch import patch_model
from autokernel.ops import KERNEL_TYPES, get_integration, get_spec
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.profiler import profile_model
from autokernel.profiling.ranking import build_plan

SPEC = get_spec("gelu")
KERNEL = load_starter("gelu")
_inputs = functools.partial(seeded_inputs, SPEC)

TINY_MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 256)
        self.act = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(self.act(self.fc(x))))


def get_inputs() -> list:
    return [torch.randn(2, 24, 64)]
'''


def test_registered_after_the_first_nine() -> None:
    # Discovered types follow the first nine, by name (autokernel.ops).
    assert KERNEL_TYPES.index("gelu") > KERNEL_TYPES.index("reduce") and SPEC.name == "gelu"
    assert get_integration("gelu").backward == "analytic"


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=str)
@pytest.mark.parametrize("shape", ((1, 1), (7, 33), (3, 1000), (1, 17000)), ids=str)
def test_matches_reference_small(shape, dtype, approximate, device) -> None:
    x, _ = _inputs(shape, dtype, device, "normal")
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (x, approximate), f"{shape} {dtype}")


@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, device) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, (9, 257), torch.float16, device)


def test_rejects_an_unknown_approximation(device) -> None:
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(torch.zeros(2, 3, device=device), "sigmoid")


def test_profile_shows_gelu_targets(tmp_path: Path) -> None:
    (tmp_path / "tiny_gelu.py").write_text(TINY_MODEL)
    loaded = load_model_file(tmp_path / "tiny_gelu.py", device="cpu")
    plan = build_plan(profile_model(loaded, warmup=1, iters=2), model="tiny_gelu",
                      class_name="Model")
    gelus = [t for t in plan.targets if t.kernel_type == "gelu"]
    assert gelus, [t.label for t in plan.targets]
    # torch.profiler keeps no string arguments; the recorded graph does: nn.GELU's approximation
    # and the functional call's (its default, the exact form).
    sites = {s.module: s.params for t in gelus for s in t.call_sites}
    assert sites == {"act": {"approximate": "tanh"}, "": {"approximate": "none"}}
    assert "aten::gelu" not in {o["op"] for o in plan.other_ops}


class GeluModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.act(self.fc(x)), approximate="tanh")


def test_patch_routes_exact_gelu_calls_and_leaves_the_tanh_form() -> None:
    kernel, = build(entry("gelu", sites=("act",)))
    model = GeluModel().to(DEVICE)
    x = torch.randn(3, 16, device=DEVICE)
    expected = model(x)
    patch = patch_model(model, [kernel])
    got = model(x)
    stats = patch.report.kernels[kernel.tag]
    assert stats.calls == 1 and stats.scopes == ["act"]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_gradient_through_the_custom_op() -> None:
    kernel, = build(entry("gelu"))
    x = torch.randn(4, 9, device=DEVICE, dtype=torch.float32, requires_grad=True)
    kernel.op.op(x, "tanh").square().sum().backward()
    expected = torch.autograd.grad(F.gelu(x, approximate="tanh").square().sum(), x)[0]
    torch.testing.assert_close(x.grad, expected, atol=1e-4, rtol=1e-4)


def test_integration_section_runs_alone_with_the_integrate_names() -> None:
    import autokernel.integrate.patch as patch_module

    import autokernel.ops.gelu as gelu_entry

    source = Path(gelu_entry.__file__).read_text()
    namespace = {k: v for k, v in vars(patch_module).items() if not k.startswith("__")}
    import autokernel.integrate.custom_ops as custom_ops
    import autokernel.integrate.integration as integration
    import autokernel.integrate.route_helpers as route_helpers
    import autokernel.integrate.routing as routing
    for module in (custom_ops, integration, routing, route_helpers):
        namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    exec(compile(integration_section(source), "<gelu section>", "exec"), namespace)
    assert namespace["INTEGRATION"].schema == get_integration("gelu").schema
