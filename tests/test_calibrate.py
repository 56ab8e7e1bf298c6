"""Measured ceilings: the cache (everywhere) and the measurement itself (on a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autokernel.gpu.calibrate import (
    Ceilings,
    cache_path,
    ceilings_key,
    get_ceilings,
    read_cache,
    write_cache,
)
from autokernel.gpu.database import detect_gpu


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _entry(name: str) -> Ceilings:
    return Ceilings(gbps=1.0, bf16_tflops=2.0, measured_at="2026-01-01T00:00:00+00:00",
                    gpu_name=name, method="stored by a test, not measured")


def test_cache_location_follows_the_environment(isolated_cache: Path) -> None:
    assert cache_path() == isolated_cache / "ceilings.json"


def test_cache_round_trip_is_atomic(isolated_cache: Path) -> None:
    entries = {"gpu a": _entry("a"), "gpu b": _entry("b")}
    write_cache(entries)
    assert read_cache() == entries
    assert [p.name for p in isolated_cache.iterdir()] == ["ceilings.json"]  # no temp file left
    assert json.loads(cache_path().read_text())["gpu a"]["gpu_name"] == "a"


@pytest.mark.parametrize("content", ["{not json", "[]", '{"k": {"gbps": 1}}', ""])
def test_an_unreadable_cache_counts_as_empty(isolated_cache: Path, content: str) -> None:
    isolated_cache.mkdir(parents=True)
    cache_path().write_text(content)
    assert read_cache() == {}


def test_no_ceilings_without_a_gpu(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_ceilings() is None
    assert not isolated_cache.exists()


@pytest.mark.gpu
def test_calibration_measures_then_serves_from_cache(isolated_cache: Path) -> None:
    assert get_ceilings(allow_measure=False) is None  # empty cache, measuring forbidden
    first = get_ceilings()
    spec = detect_gpu()
    assert first is not None and first.gpu_name == torch.cuda.get_device_name(0)
    if spec is not None:
        assert 0.5 * spec.gbps < first.gbps < 1.05 * spec.gbps
        assert 0.4 * spec.bf16_tflops < first.bf16_tflops < 1.05 * spec.bf16_tflops
    assert read_cache()[ceilings_key()] == first
    assert get_ceilings() == first  # cached: same timestamp, no new measurement
    again = get_ceilings(recalibrate=True)
    assert again is not None and read_cache()[ceilings_key()] == again
    # Two measurements of the same card agree to within a few percent.
    assert again.gbps == pytest.approx(first.gbps, rel=0.1)
    assert again.bf16_tflops == pytest.approx(first.bf16_tflops, rel=0.1)
