"""torch.max(x, dim) routed to the amax kernel only where the caller provably drops the indices
(ops/reduce.py `_max_values_call`): the kernel computes the values alone, so a call whose
indices may be read stays with PyTorch."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from autokernel.integrate.patch import patch_model
from autokernel.ops.reduce import _reads_only_values
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.session import profile_plan
from autokernel.profiling.splice_check import stand_in_kernels

STYLES = Path(__file__).resolve().parent / "op_styles"


def _call_offset(function: object) -> tuple[object, int]:
    """The code of `function` and the offset of its first call of `max`."""
    import dis

    code = function.__code__  # type: ignore[attr-defined]
    instructions = list(dis.get_instructions(code))
    at = next(i for i, ins in enumerate(instructions) if ins.argval == "max")
    call = next(ins for ins in instructions[at:] if ins.opname.startswith("CALL"))
    return code, call.offset


def indexed(x: torch.Tensor) -> torch.Tensor:
    return torch.max(x, 1)[0]


def attribute(x: torch.Tensor) -> torch.Tensor:
    return x.max(dim=1).values


def unpacked(x: torch.Tensor) -> torch.Tensor:
    values, _ = torch.max(x, -1)
    return values


def indices_read(x: torch.Tensor) -> torch.Tensor:
    values, where = torch.max(x, -1)
    return values + where


def indices_taken(x: torch.Tensor) -> torch.Tensor:
    return torch.max(x, 1)[1]


def whole(x: torch.Tensor) -> object:
    return torch.max(x, 1)


def kept(x: torch.Tensor) -> torch.Tensor:
    result = torch.max(x, 1)
    return result.values


def test_the_values_only_forms_are_proved_and_nothing_else() -> None:
    proved = {f.__name__: _reads_only_values(*_call_offset(f))
              for f in (indexed, attribute, unpacked, indices_read, indices_taken, whole, kept)}
    assert proved == {"indexed": True, "attribute": True, "unpacked": True,
                      "indices_read": False, "indices_taken": False, "whole": False,
                      "kept": False}


class ReadsIndices(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, where = torch.max(x, dim=-1)
        return values + where


class DropsIndices(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=-1)[0] + x.max(-1).values


def test_the_route_takes_only_calls_whose_indices_go_unused() -> None:
    loaded = load_model_file(STYLES / "reduce_max_unpacked.py", device="cpu")
    _, plan = profile_plan(loaded, "m", "Model", warmup=0, iters=1, compiled=False)
    assert [t.route for t in plan.targets] == ["call"]
    x = torch.rand(128, 1024)
    for model, taken in ((DropsIndices(), 2), (ReadsIndices(), 0)):
        expected = model(x)
        patch = patch_model(model, stand_in_kernels(plan, "cpu"))
        try:
            out = model(x)
        finally:
            patch.unpatch()
        torch.testing.assert_close(out, expected)
        stats = next(iter(patch.report.kernels.values()))
        assert stats.calls == taken
        if not taken:
            assert stats.fallbacks == {"torch.max(x, dim): its indices may be read": 1}
