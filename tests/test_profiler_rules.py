"""Where the profiler's per-type rules live: each op entry declares its own, profiling/ orders
and gathers them (issue 16)."""

from __future__ import annotations

from autokernel.ops import all_specs
from autokernel.profiling.op_rules import op_rules
from autokernel.profiling.patterns import PATTERN_ORDER, patterns


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
