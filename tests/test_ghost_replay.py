"""The ghost replay (every Triton launch skipped; a still-correct output is REJECTED) must not take
an honest kernel's untouched output for a computed one where the answer is 0: the cross_entropy
starter at V = 1 (every loss is 0) was rejected whenever the job's poison was random bytes that
happened to be within atol of 0."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autokernel.harness.compare import check_output
from autokernel.harness.guards import Poison, PoisonFiller
from autokernel.harness.outputs import zero_filled
from autokernel.harness.result import Status
from autokernel.harness.runner import run_bench
from autokernel.kernels import starter_path
from autokernel.ops.spec import Tolerance

CPU = torch.device("cpu")
TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)


def _poisoned_scalar(poison: Poison) -> torch.Tensor:
    """A float32 scalar as the candidate process leaves it before anything writes it."""
    out = torch.empty((), dtype=torch.float32)
    PoisonFiller(poison, CPU).storage(out)
    return out


def test_random_bytes_can_pass_for_zero_but_the_ghost_poison_cannot() -> None:
    bits = Poison.fresh().bits
    # Random bytes are within 1e-4 of 0 for about half of all seeds (any float below ~2^-14):
    # an untouched output "is correct" where the answer is 0.
    lucky = next(seed for seed in range(200) if
                 check_output(_poisoned_scalar(Poison("bytes", bits, seed)), torch.zeros(
                     (), dtype=torch.float64), (), torch.float32, CPU, TOLERANCE,
                     poison=Poison("bytes", bits, seed)) is None)
    poison = Poison("bytes", bits, lucky)
    ghost = poison.recognisable()
    assert ghost.mode == "nan" and ghost.bits == poison.bits
    found = check_output(_poisoned_scalar(ghost), torch.zeros((), dtype=torch.float64), (),
                         torch.float32, CPU, TOLERANCE, poison=ghost)
    assert found is not None and found.kind == "unwritten", found


def test_zero_filled() -> None:
    assert zero_filled(torch.zeros(()))
    assert zero_filled((torch.zeros(3), -torch.zeros(2, dtype=torch.float16)))
    assert not zero_filled((torch.zeros(3), torch.ones(2)))
    assert not zero_filled(torch.full((2,), float("nan")))
    assert not zero_filled(torch.zeros(0))
    assert not zero_filled([0.0])


@pytest.mark.parametrize("initial", ["empty", "zeros"])
def test_cross_entropy_at_one_class_is_not_a_ghost(initial: str, tmp_path: Path) -> None:
    """Every loss is 0 at V = 1: an output left as allocated (poison) or zero-filled by the host,
    its launches skipped, must not read as computed without them. (Twice with an empty output:
    the job's poison mode is drawn at random, and random bytes fooled the judge about half the
    time.)"""
    source = starter_path("cross_entropy").read_text()
    allocation = "out = torch.empty((), dtype=torch.float32, device=logits.device)"
    assert allocation in source
    kernel = tmp_path / f"cross_entropy_{initial}.py"
    kernel.write_text(source.replace(allocation, allocation.replace("empty", initial)))
    for attempt in range(2 if initial == "empty" else 1):
        result = run_bench(kernel, device="cpu", shapes=["5x1"], dtypes=["fp32"], quick=True,
                           cache_dir=tmp_path / "cache", only_stages=["smoke", "edge_sizes"],
                           correctness_only=True)
        assert result.status is Status.PASS, result.reason
