"""Where the profiler's per-type rules live: each op entry declares its own, profiling/ orders
and gathers them (issue 16)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autokernel.ops import KERNEL_TYPES, all_specs
from autokernel.profiling import residual_add, routable
from autokernel.profiling.callsites import SiteKey
from autokernel.profiling.events import ModuleInfo
from autokernel.profiling.op_rules import op_rules
from autokernel.profiling.patterns import PATTERN_ORDER, patterns
from autokernel.profiling.routable import site_route, unverified_param
from autokernel.profiling.site_routes import CALL


def test_pattern_order_names_exactly_the_types_with_patterns() -> None:
    with_patterns = {name for name, spec in all_specs().items() if spec.patterns}
    assert set(PATTERN_ORDER) == with_patterns
    assert len(PATTERN_ORDER) == len(set(PATTERN_ORDER))


def test_patterns_run_type_by_type_in_the_stated_order() -> None:
    specs = all_specs()
    assert patterns() == tuple(f for name in PATTERN_ORDER for f in specs[name].patterns)


def test_every_aten_op_rule_comes_from_one_op_entry() -> None:
    declared = [(name, spec.name) for spec in all_specs().values() for name in spec.aten_ops]
    rules = op_rules()
    assert len(rules) == len(declared)
    assert all(rules[name].kernel_type == kernel_type for name, kernel_type in declared)
    assert rules["aten::linear"].role is not None  # matmul's roles travel with its rule
    assert rules["aten::sum"].root_only


def test_a_new_kernel_type_is_routed_by_its_own_op_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A type registered with nothing but its op entry gets its route and param check asked by
    `routable`, which needs no edit (the brief of issue 16: one op file per new type)."""
    import autokernel.ops as ops

    def route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
        return f"no: {site.aten_op} in {module_type}"

    def mismatch(site_params: Mapping[str, Any], shape: list[int],
                 verified: Mapping[str, Any]) -> str | None:
        return None if site_params == verified else f"no: {shape}"

    for name, hooks in (("throwaway", (route, mismatch)), ("plain_throwaway", (None, None))):
        entry = ModuleType(f"autokernel.ops.{name}")
        entry.SPEC = replace(ops.get_spec("reduce"), name=name, site_route=hooks[0],
                             param_mismatch=hooks[1])
        monkeypatch.setitem(sys.modules, entry.__name__, entry)
    monkeypatch.setattr(ops, "KERNEL_TYPES", (*ops.KERNEL_TYPES, "throwaway", "plain_throwaway"))
    site = SiteKey(module="block.op", aten_op="aten::thing", shape=(4, 8), dtype="fp16")
    modules = {"block.op": ModuleInfo(type="my.Module")}

    assert site_route("throwaway", site, modules) == "no: aten::thing in my.Module"
    assert site_route("throwaway", replace(site, module="elsewhere"), modules) == \
        "no: aten::thing in None"
    assert unverified_param("throwaway", {"k": 1}, [4, 8], {"k": 2}) == "no: [4, 8]"
    assert unverified_param("throwaway", {"k": 1}, [4, 8], {"k": 1}) is None
    # A type that declares neither is the call the router intercepts, with no param to match.
    assert site_route("plain_throwaway", site, modules) == CALL
    assert unverified_param("plain_throwaway", {"eps": 1e-5}, [4, 8], {"eps": 1e-6}) is None


def test_routable_and_the_residual_add_pattern_name_no_kernel_type() -> None:
    """Routes and param checks live in the op entries: routable.py dispatches to them, and the
    residual-add pattern reads the norm each fused type declares (`NormAfterAdd`)."""
    routable_source = Path(routable.__file__).read_text()
    named = [kernel_type for kernel_type in KERNEL_TYPES
             if re.search(rf"\b{kernel_type}\b", routable_source)]
    assert named == []
    residual_add_source = Path(residual_add.__file__).read_text()
    assert "torch.nn.modules" not in residual_add_source
    assert not re.search(r'"(rmsnorm|layernorm)"', residual_add_source)
