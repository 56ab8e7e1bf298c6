"""From classified rows to a ranked `Plan`: call sites, shares, Amdahl, and a markdown rendering.

Every timed row lands in exactly one target or in "other", so the shares of the targets and of
"other" add up to 1 of the measured time by construction. A target is one kernel type in one role
(matmul's linear layers, batched products and other GEMMs are three targets), each ranked and
benchmarked at its own shapes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from autokernel.profiling.classify import (
    OTHER,
    Attribution,
    SiteKey,
    classify_profile,
    registry_dims,
)
from autokernel.profiling.callsites import axis_dim
from autokernel.profiling.events import ModuleInfo, RecordedProfile
from autokernel.profiling.plan import (
    NEGLIGIBLE_SHARE,
    RANK_BY,
    CallSite,
    Plan,
    Target,
    amdahl_speedup,
    format_speedup,
)
from autokernel.profiling.routable import NO_OP, site_route, target_route, unverified_param
from autokernel.text import count_of

OTHER_OPS_LISTED = 10


def no_target_message() -> str:
    """What the plan says when no time is in any kernel type: their number from the registry."""
    from autokernel.ops import KERNEL_TYPES

    return ("no optimizable kernel: none of the measured time is in the "
            f"{count_of(len(KERNEL_TYPES), 'kernel type')}")


@dataclass
class _Tally:
    time_us: float = 0.0
    calls: set[tuple[str, int]] = field(default_factory=set)

    def add(self, attribution: Attribution) -> None:
        self.time_us += attribution.time_us
        self.calls.add(attribution.call)


def _per_forward(count: int, iterations: int) -> int:
    return max(1, round(count / iterations)) if count else 0


def _target(kernel_type: str, role: str, sites: dict[SiteKey, _Tally], iterations: int,
            total_us: float, modules: dict[str, ModuleInfo]) -> Target:
    per_ms = 1.0 / (1000.0 * iterations)
    ranked_sites = sorted(sites.items(), key=lambda kv: -kv[1].time_us)
    by_shape: dict[tuple[int, ...], float] = defaultdict(float)
    by_dtype: dict[str, float] = defaultdict(float)
    for key, tally in ranked_sites:
        by_dtype[key.dtype] += tally.time_us
        if key.shape:
            by_shape[key.shape] += tally.time_us
    shapes = [list(s) for s, _ in sorted(by_shape.items(), key=lambda kv: -kv[1])]
    bench_shape = shapes[0] if shapes else []
    routes = {key: site_route(kernel_type, key, modules) for key, _ in ranked_sites}
    # The parameters (eps, causal, ...) of the hottest call site at the bench shape that verify
    # can route, else of the hottest there: the kernel is verified with them, and verify takes
    # only calls with the same eps or scale, so a kernel verified for an unroutable site's eps
    # would take no call at all.
    at_bench = [k for k, _ in ranked_sites if list(k.shape) == bench_shape]
    routable = [k for k in at_bench if not routes[k].startswith("no")]
    params = dict((routable or at_bench)[0].params) if at_bench else {}
    # Sites over a dim that is not the last put axis shapes among the target's shapes, which the
    # harness then checks: the target carries an axis (the hottest such site's) even when its
    # bench shape is over the last dim, so its kernel is routed for both kinds of call.
    axis_site = next((dict(k.params) for k, _ in ranked_sites if "axis" in dict(k.params)), None)
    if axis_site is not None and "axis" not in params:
        params["axis"] = axis_site["axis"]
    call_sites = [
        CallSite(
            module=key.module,
            aten_op=key.aten_op,
            shape=list(key.shape),
            dtype=key.dtype,
            calls=_per_forward(len(tally.calls), iterations),
            time_ms=tally.time_us * per_ms,
            params=dict(key.params),
            notes=dict(key.notes),
            route=(routes[key] if routes[key].startswith("no") else
                   unverified_param(kernel_type, dict(key.params), list(key.shape), params)
                   or routes[key]),
        )
        for key, tally in ranked_sites
    ]
    time_us = sum(t.time_us for t in sites.values())
    calls = set().union(*(t.calls for t in sites.values()))
    return Target(
        rank=0,
        kernel_type=kernel_type,
        shapes=shapes,
        dtype=max(by_dtype.items(), key=lambda kv: kv[1])[0],
        calls=_per_forward(len(calls), iterations),
        time_ms=time_us * per_ms,
        share=time_us / total_us if total_us else 0.0,
        bench_shape=bench_shape,
        amdahl_2x=1.0,
        cumulative_2x=1.0,
        call_sites=call_sites,
        params=params,
        dims=_shape_dims(kernel_type, shapes),
        role=role,
        route=target_route(site.route for site in call_sites),
    )


def _join_roleless(sites: dict[tuple[str, str], dict[SiteKey, _Tally]]) -> None:
    """Calls of a kernel type with roles whose role is unknown (a GEMM kernel with no op) join
    that type's largest target, which then still has a shape to benchmark; they stand alone only
    when the type has no other target."""
    for kernel_type, role in list(sites):
        if role:
            continue
        peers = [key for key in sites if key[0] == kernel_type and key[1]]
        # Only calls with no op are roleless by ignorance: a sum's role is "" by design (reduce
        # gives its mean and amax targets of their own), and it never joins them.
        unknown = {site: tally for site, tally in sites[(kernel_type, role)].items()
                   if site.aten_op == NO_OP}
        if not peers or not unknown:
            continue
        largest = max(peers, key=lambda key: sum(t.time_us for t in sites[key].values()))
        for site, tally in unknown.items():
            sites[largest][site] = tally
            del sites[(kernel_type, role)][site]
        if not sites[(kernel_type, role)]:
            del sites[(kernel_type, role)]


def _rank(targets: list[Target], other_share: float,
          share_of: Callable[[Target], float] = lambda t: t.share) -> None:
    """Ranks and Amdahl figures from `share_of` each target (its eager share unless ranked by the
    compiled one), in place.

    The ceiling's leftover time is summed from what lies below each target ("other", then the
    lower-ranked targets), not taken as 1 minus the summed shares above it: with no "other" time
    it is then exactly 0 below the last target, an unbounded ceiling (None), where
    1 - 0.9999999999999999 made it 9007199254740992x.
    """
    left = [other_share] * len(targets)
    for index in range(len(targets) - 2, -1, -1):
        left[index] = left[index + 1] + share_of(targets[index + 1])
    cumulative = 0.0
    for rank, target in enumerate(targets, start=1):
        cumulative += share_of(target)
        target.rank = rank
        target.amdahl_2x = amdahl_speedup(share_of(target))
        target.cumulative_2x = amdahl_speedup(cumulative)
        rest = left[rank - 1]
        target.cumulative_limit = 1.0 / rest if rest > NEGLIGIBLE_SHARE else None


def build_plan(
    record: RecordedProfile,
    model: str,
    class_name: str,
    attributions: Iterable[Attribution] | None = None,
    warmup: int = 0,
) -> Plan:
    """Rank the kernel types by share of the measured time, with Amdahl's 2x figures."""
    rows = list(classify_profile(record) if attributions is None else attributions)
    total_us = sum(a.time_us for a in rows)
    iterations = max(1, record.iterations)

    sites: dict[tuple[str, str], dict[SiteKey, _Tally]] = defaultdict(
        lambda: defaultdict(_Tally))
    other: dict[str, _Tally] = defaultdict(_Tally)
    for attribution in rows:
        if attribution.kernel_type == OTHER or attribution.site is None:
            other[attribution.label].add(attribution)
        else:
            key = (attribution.kernel_type, attribution.site.role)
            sites[key][attribution.site].add(attribution)

    _join_roleless(sites)
    targets = [_target(kt, role, s, iterations, total_us, record.modules)
               for (kt, role), s in sites.items()]
    targets.sort(key=lambda t: -t.time_ms)
    other_us = sum(t.time_us for t in other.values())
    _rank(targets, other_us / total_us if total_us else 0.0)

    per_ms = 1.0 / (1000.0 * iterations)
    other_ops = [
        {
            "op": label,
            "time_ms": tally.time_us * per_ms,
            "share": tally.time_us / total_us if total_us else 0.0,
            "calls": _per_forward(len(tally.calls), iterations),
        }
        for label, tally in sorted(other.items(), key=lambda kv: -kv[1].time_us)
    ][:OTHER_OPS_LISTED]

    message = ""
    if total_us <= 0:
        message = "the profiled forward recorded no measurable time"
    elif not targets:
        top = ", ".join(f"{o['op']} {o['share']:.0%}" for o in other_ops[:3])
        message = f"{no_target_message()} (top: {top})"

    return Plan(
        model=model,
        class_name=class_name,
        device=record.device,
        dtype=record.dtype,
        gpu=record.gpu,
        total_ms=total_us * per_ms,
        targets=targets,
        other_ms=other_us * per_ms,
        other_share=other_us / total_us if total_us else 0.0,
        other_ops=other_ops,
        iterations=record.iterations,
        message=message,
        time_source=record.time_source,
        warmup=record.warmup if record.warmup is not None else warmup,
        versions=dict(record.versions),
    )


def rank_plan(plan: Plan, rank_by: str) -> None:
    """Rank the targets by their eager share ("eager") or by their share under torch.compile
    ("compile"), with the Amdahl figures of that forward; in place. Ranking by the compiled
    shares needs them (`compiled.add_compiled_shares`)."""
    if rank_by not in RANK_BY:
        raise ValueError(f"rank_by must be one of {', '.join(RANK_BY)}, not {rank_by!r}")
    if rank_by == "compile" and plan.compile_ms is None:
        raise ValueError("ranking by the compiled shares needs a profile of the compiled model")
    plan.rank_by = rank_by
    if rank_by == "eager":
        plan.targets.sort(key=lambda t: -t.time_ms)
        _rank(plan.targets, plan.other_share)
        return

    def compiled(target: Target) -> float:
        return target.compile_share or 0.0

    plan.targets.sort(key=lambda t: (-compiled(t), -t.time_ms))
    _rank(plan.targets, plan.compile_other_share or 0.0, compiled)


def _shape_dims(kernel_type: str, shapes: list[list[int]]) -> list[str]:
    """The registry dims, and the axis dim K when a shape is over a dim that is not the last."""
    dims = list(registry_dims(kernel_type))
    inner = axis_dim(kernel_type)
    if inner is not None and any(len(s) > len(dims) for s in shapes):
        dims.append(inner)
    return dims


# ---------------------------------------------------------------------------------------------
# Rendering


def format_shape(dims: list[str], shape: list[int]) -> str:
    if not shape:
        return "?"
    if len(dims) != len(shape):
        return "x".join(str(d) for d in shape)
    return " ".join(f"{n}={d}" for n, d in zip(dims, shape))


def format_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in sorted(params.items()))


def plan_rows(plan: Plan, top: int | None = None) -> list[list[str]]:
    """The table people read, one row per target then "other" (shared by rich and markdown),
    in `plan_columns(plan)`."""
    compiled = plan.compile_ms is not None
    rows = []
    for t in plan.targets[:top]:
        shapes = format_shape(t.dims, t.bench_shape)
        if len(t.shapes) > 1:
            shapes += f" (+{len(t.shapes) - 1} more)"
        row = [str(t.rank), t.label, f"{t.share:.1%}"]
        if compiled:
            row.append(_compiled_share(t.compile_share))
        row += [
            f"{t.time_ms:.3f}", str(t.calls),
            shapes, t.dtype, format_params(t.params), t.route or "?",
            format_speedup(t.amdahl_2x, 3), format_speedup(t.cumulative_2x, 3),
            format_speedup(t.cumulative_limit),
        ]
        rows.append(row)
    hidden = plan.targets[top:] if top is not None else []
    blank = [""] * (len(PLAN_COLUMNS) - 4)
    if hidden:
        row = ["", count_of(len(hidden), "more target"), f"{sum(t.share for t in hidden):.1%}"]
        if compiled:
            row.append(_compiled_share(sum(t.compile_share or 0.0 for t in hidden)))
        rows.append(row + [f"{sum(t.time_ms for t in hidden):.3f}", *blank])
    row = ["", OTHER, f"{plan.other_share:.1%}"]
    if compiled:
        row.append(_compiled_share(plan.compile_other_share))
    rows.append(row + [f"{plan.other_ms:.3f}", *blank])
    return rows


def _compiled_share(share: float | None) -> str:
    return "?" if share is None else f"{share:.1%}"


# "verify splices": how `autokernel verify` would route the target's kernel into the model
# (autokernel.profiling.splice_check, else the op entries' rules in routable.py); "no: why" is a
# target it cannot use.
PLAN_COLUMNS = ["#", "kernel type", "share", "ms/fwd", "calls", "bench shape", "dtype", "params",
                "verify splices", "2x e2e", "cum. 2x", "ceiling"]
COMPILED_COLUMN = "compiled"  # the share of the torch.compile'd forward, after the eager share


def plan_columns(plan: Plan) -> list[str]:
    """PLAN_COLUMNS, with the compiled share beside the eager one when the plan has it."""
    if plan.compile_ms is None:
        return list(PLAN_COLUMNS)
    return [*PLAN_COLUMNS[:3], COMPILED_COLUMN, *PLAN_COLUMNS[3:]]


def ranking_line(plan: Plan) -> str:
    """What ranks the targets and what the Amdahl columns are of, for the plan's header."""
    if plan.rank_by == "compile":
        return (f"ranked by share under torch.compile ({plan.compile_ms:.3f} ms/forward "
                "compiled); 2x e2e, cum. 2x and ceiling are of the compiled forward")
    if plan.compile_ms is not None:
        return (f"ranked by eager share; compiled: the share of the torch.compile'd forward "
                f"({plan.compile_ms:.3f} ms/forward) its ops still take")
    return "ranked by eager share"


def format_markdown(plan: Plan, top: int | None = None) -> str:
    where = plan.gpu or plan.device
    versions = ", ".join(f"{k} {v}" for k, v in plan.versions.items())
    lines = [
        f"### {plan.model} ({plan.class_name}), {plan.dtype} on {where}",
        "",
        f"{plan.total_ms:.3f} ms of {plan.time_source or 'measured time'} per forward "
        f"({plan.iterations} profiled forwards after {plan.warmup} warm-up). {versions}",
        "",
        _sentence(ranking_line(plan)),
        "",
        "| " + " | ".join(plan_columns(plan)) + " |",
        "|" + "|".join("---" for _ in plan_columns(plan)) + "|",
    ]
    for row in plan_rows(plan, top):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    unroutable = [t for t in plan.targets[:top] if t.route.startswith(("no", "part"))]
    if unroutable:
        lines += ["", "Not spliced in by `autokernel verify`: " + "; ".join(
            f"#{t.rank} {t.label}: {_unrouted_sites(t)}" for t in unroutable)]
    if plan.other_ops:
        lines += ["", "Largest \"other\" ops: " + ", ".join(
            f"`{o['op'][:60]}` {o['share']:.1%}" for o in plan.other_ops[:5])]
    if plan.message:
        lines += ["", f"**{plan.message}**"]
    for note in plan.notes:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def _unrouted_sites(target: Target) -> str:
    """The call sites verify cannot route, with why: "attn (no: attn_mask)"."""
    sites = [f"{site.module or '<model>'} ({site.route})" for site in target.call_sites
             if site.route.startswith("no")]
    return ", ".join(dict.fromkeys(sites))
