"""Test-wide setup: CPU runs go through the Triton interpreter; GPU-only tests skip cleanly."""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
# Must happen before any test module imports a Triton kernel: @triton.jit reads it at decoration.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The loop's prompts compile each kernel ahead of time for their resource figures (seconds per
# kernel); the suite's loop runs skip that, and tests/test_hardware_prompt.py checks it.
os.environ.setdefault("AUTOKERNEL_KERNEL_RESOURCES", "0")

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The minutes-long end-to-end tests go first (a stable sort: every xdist worker collects the
    # same order). Under `-n auto --dist worksteal` the others then fill in around them, instead
    # of one worker starting a 4-minute loop test last while the other has nothing left to do.
    items.sort(key=lambda item: "slow" not in item.keywords)
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory():
    """Hand cached blocks back after each test, so full-size GPU tests can run side by side
    (`pytest -n N`): without it each worker's allocator keeps its high-water mark, ~20 GiB."""
    yield
    if HAS_CUDA:
        torch.cuda.empty_cache()
