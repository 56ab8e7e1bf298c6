"""Host cost of a routed call, per kernel type: what `patch(model)` adds over the bare launch.

    python -m autokernel.benchmarks route-host-cost [--device cuda|cpu] [--out FILE.md] \
        [--types rmsnorm softmax ...]

For each kernel type, a one-op module in the way models call it (nn.RMSNorm, F.softmax inside a
module, a residual add feeding an nn.RMSNorm, ...) is patched with the type's starter kernel
(registered as `autokernel.load` registers a finished kernel), and four host times per call are
taken with the GPU held busy by a spin kernel queued first, so every launch only enqueues
(`end_to_end.time_host`, the figure verify's ablation reports):

- eager: the module as written;
- routed: the patched module (what a user's patched model pays per call);
- bare: the starter's kernel_fn called directly with the arguments the route passes, plus an
  empty module call (the nn.Module call the routed path also pays);
- the cost of routing: routed - bare (issue 25 asks <= 10 µs).

The routed module must send exactly one call to the kernel (checked and printed), and its output
must match eager's. fp16, small shapes (a decode step's: where host cost is the whole cost).
A cProfile of 200 routed calls per type, sorted by internal time, is written beside the table.

`--device cpu` isolates the routing layer on a machine without a GPU: each type's kernel is a stub
whose kernel_fn is the op entry's fake (correctly shaped outputs from one `torch.empty`, no
Triton), loaded and patched the same way (`build_kernels`, `patch_model`), and each call is timed
on the thread's CPU clock (there is no device to hold busy), and each figure is the fastest of
CPU_ROUNDS samples of CPU_CALLS calls (a shared machine's other work only adds to a sample). "bare"
is then the stub plus the empty module call, so "routing" is what the routes, the Router and the op
wrapper add; the outputs are the stubs' uninitialized memory, not compared. Shapes are smaller
there, so that eager's CPU compute does not drown the table (the routed and bare calls compute
nothing).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.end_to_end import time_host
from autokernel.integrate.integration import Integration
from autokernel.integrate.loader import verified_params
from autokernel.integrate.patch import build_kernels, patch_model
from autokernel.kernels import starter_path
from autokernel.ops import get_integration, get_spec
from autokernel.ops.spec import dtype_name
from autokernel.reference import REFERENCES
from autokernel.versions import software_versions, source_commit

DTYPE = torch.float16
DEVICE = torch.device("cuda")  # `--device` sets it
ROUNDS = 30
CPU_ROUNDS = 31  # samples per contestant on the CPU, each the mean of CPU_CALLS calls
CPU_CALLS = 100


@dataclass(frozen=True)
class Sizes:
    """A decode step's shapes on the GPU; smaller on the CPU, where eager computes for real."""

    width: int
    rows: int
    vocab: int
    hidden: int
    heads: int
    seq: int


GPU_SIZES = Sizes(width=2048, rows=32, vocab=32000, hidden=5632, heads=16, seq=128)
CPU_SIZES = Sizes(width=128, rows=4, vocab=256, hidden=352, heads=2, seq=16)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=DTYPE)


class Call(nn.Module):
    """A module whose forward is one call: `fn(*inputs)`."""

    def __init__(self, fn: Callable[..., Any], *children: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        self.children_ = nn.ModuleList(children)

    def forward(self, *inputs: Any) -> Any:
        return self.fn(self, *inputs)


class AddNorm(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> Any:
        h = x + residual
        return self.norm(h), h


class SwiGLU(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Rotary(nn.Module):
    def __init__(self, seq: int, dim: int) -> None:
        super().__init__()
        angles = torch.outer(torch.arange(seq, dtype=torch.float32),
                             1.0 / 10000 ** (torch.arange(0, dim, 2) / dim))
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos_cached", angles.cos())
        self.register_buffer("sin_cached", angles.sin())

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = q.shape[-2]
        cos, sin = self.cos_cached[:seq], self.sin_cached[:seq]
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


class Head(nn.Module):
    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(h)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


@dataclass
class Case:
    kernel_type: str
    module: Callable[[], nn.Module]
    inputs: Callable[[], tuple[Any, ...]]
    bare: Callable[[nn.Module, Callable[..., Any], tuple[Any, ...]], Callable[[], Any]]
    role: str = ""
    params: dict[str, Any] | None = None
    shape: tuple[int, ...] = ()  # the profiled shape, where the route needs it (an LM head's)


def _cases(sizes: Sizes) -> list[Case]:
    d, rows, vocab, hidden = sizes.width, sizes.rows, sizes.vocab, sizes.hidden
    heads, seq = sizes.heads, sizes.seq
    return [
        Case("rmsnorm", lambda: nn.RMSNorm(d, eps=1e-6), lambda: (_randn(rows, d),),
             lambda m, k, a: lambda: k(a[0], m.weight, 1e-6), params={"eps": 1e-6}),
        Case("layernorm", lambda: nn.LayerNorm(d), lambda: (_randn(rows, d),),
             lambda m, k, a: lambda: k(a[0], m.weight, m.bias, 1e-5), params={"eps": 1e-5}),
        Case("softmax", lambda: Call(lambda self, x: torch.softmax(x, dim=-1)),
             lambda: (_randn(rows, 4096),), lambda m, k, a: lambda: k(a[0])),
        Case("gelu", lambda: Call(lambda self, x: F.gelu(x)), lambda: (_randn(rows, 8192),),
             lambda m, k, a: lambda: k(a[0], "none")),
        Case("reduce", lambda: Call(lambda self, x: x.sum(-1)), lambda: (_randn(256, 4096),),
             lambda m, k, a: lambda: k(a[0])),
        Case("cross_entropy", lambda: Call(lambda self, x, t: F.cross_entropy(x, t)),
             lambda: (_randn(rows, vocab), torch.randint(0, vocab, (rows,), device=DEVICE)),
             lambda m, k, a: lambda: k(*a)),
        Case("flash_attention",
             lambda: Call(lambda self, q, k, v: F.scaled_dot_product_attention(
                 q, k, v, is_causal=True)),
             lambda: tuple(_randn(1, heads, seq, 64) for _ in "qkv"),
             lambda m, k, a: lambda: k(*a, True, None), params={"causal": True}),
        Case("matmul", lambda: nn.Linear(d, d, bias=False), lambda: (_randn(rows, d),),
             lambda m, k, a: (lambda wt=m.weight.t().contiguous(): lambda: k(a[0], wt))(),
             role="linear"),
        Case("fused_mlp", lambda: SwiGLU(d, hidden), lambda: (_randn(rows, d),),
             lambda m, k, a: lambda: k(a[0], m.gate.weight, m.up.weight, m.down.weight, "silu"),
             params={"activation": "silu"}),
        Case("rotary_embedding", lambda: Rotary(seq, 64),
             lambda: (_randn(1, heads, seq, 64), _randn(1, heads, seq, 64)),
             lambda m, k, a: (lambda c=m.cos_cached.to(DTYPE), s=m.sin_cached.to(DTYPE):
                              lambda: (k(a[0], c, s), k(a[1], c, s)))()),
        Case("add_rmsnorm", lambda: AddNorm(nn.RMSNorm(d, eps=1e-6)),
             lambda: (_randn(rows, d), _randn(rows, d)),
             lambda m, k, a: lambda: k(a[0], a[1], m.norm.weight, 1e-6), params={"eps": 1e-6}),
        Case("add_layernorm", lambda: AddNorm(nn.LayerNorm(d)),
             lambda: (_randn(rows, d), _randn(rows, d)),
             lambda m, k, a: lambda: k(a[0], a[1], m.norm.weight, m.norm.bias, 1e-5),
             params={"eps": 1e-5}),
        Case("linear_cross_entropy", lambda: Head(d, vocab),
             lambda: (_randn(rows, d), torch.randint(0, vocab, (rows,), device=DEVICE)),
             lambda m, k, a: lambda: k(a[0], m.lm_head.weight, a[1]), shape=(rows, d, vocab)),
    ]


def stub_source(kernel_type: str) -> str:
    """A kernel file whose kernel_fn is the op entry's fake: the outputs' shapes and dtypes from
    one `torch.empty` each, nothing computed, so that the routing layer's host cost is all that
    differs between a routed and a bare call."""
    return (f'"""A stub {kernel_type} kernel: the op entry\'s fake, for timing the routing."""\n'
            "from autokernel.ops import get_integration\n\n"
            f"KERNEL_TYPE = {kernel_type!r}\n"
            f"kernel_fn = get_integration({kernel_type!r}).fake\n")


def _kernel(case: Case, stub: bool) -> Any:
    spec = get_spec(case.kernel_type)
    entry = {"tag": f"01_{case.kernel_type}", "kernel_type": case.kernel_type, "role": case.role,
             "dtypes": [dtype_name(DTYPE)],
             "params": verified_params(case.kernel_type, dict(case.params or {})),
             "sites": [""],  # the one-op module itself, as the profiler would name it
             "tolerances": {dtype_name(d): [t.atol, t.rtol] for d, t in spec.tolerances.items()},
             "limits": {}, "shape": list(case.shape)}
    source = stub_source(case.kernel_type) if stub else starter_path(case.kernel_type).read_text()
    integration: dict[str, Integration] = {case.kernel_type: get_integration(case.kernel_type)}
    [kernel] = build_kernels([entry], {entry["tag"]: source}, REFERENCES, integration,
                             DEVICE.type, "route_host_cost")
    return kernel


def time_host_cpu(contestants: dict[str, Callable[[], Any]],
                  rounds: int = CPU_ROUNDS, calls: int = CPU_CALLS) -> dict[str, Any]:
    """Host time per call on the CPU: in each round every contestant (in a rotating order, so
    that drift hits them alike) is called `calls` times in a row with the garbage collector off;
    a sample is the mean over those calls. The clock is this thread's CPU time, not the wall
    clock: on a shared machine the time the thread waits for a core is not the call's cost.
    The same shape of result as `time_host`."""
    samples: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn = contestants[name]
                began = time.thread_time()
                for _ in range(calls):
                    fn()
                samples[name].append((time.thread_time() - began) / calls * 1e6)
    finally:
        if enabled:
            gc.enable()
    return {"contestants": {name: {"median_us": statistics.median(v), "iqr_us": _iqr(v),
                                   "fastest_us": min(v)} for name, v in samples.items()}}


def _iqr(values: list[float]) -> float:
    quartiles = statistics.quantiles(values, n=4)
    return quartiles[2] - quartiles[0]


def _synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def measure(case: Case, profile_log: io.StringIO) -> dict[str, Any]:
    torch.manual_seed(0)
    stub = DEVICE.type == "cpu"
    eager = case.module().to(DEVICE, DTYPE).eval()
    patched = case.module().to(DEVICE, DTYPE).eval()
    patched.load_state_dict(eager.state_dict())
    kernel = _kernel(case, stub)
    patch = patch_model(patched, [kernel])
    inputs = case.inputs()
    module_kernel_fn = sys.modules[f"route_host_cost_{kernel.tag}"].kernel_fn
    shell = Call(lambda self, *a: a[0])
    bare_call = case.bare(eager, module_kernel_fn, inputs)
    contestants = {"eager": lambda: eager(*inputs), "routed": lambda: patched(*inputs),
                   "bare": lambda: (shell(*inputs), bare_call())}
    with torch.no_grad():
        expected = eager(*inputs)
        patch.report.reset_counts()
        got = patched(*inputs)
        calls = patch.report.calls
        first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
        # A stub's output is uninitialized memory: nothing to compare.
        agrees = None if stub else torch.allclose(first(got).float(), first(expected).float(),
                                                  atol=2e-2, rtol=2e-2)
        for fn in contestants.values():
            fn()
        _synchronize()
        host = (time_host_cpu(contestants) if stub else
                time_host(contestants, DEVICE, ROUNDS))["contestants"]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            patched(*inputs)
        profiler.disable()
        _synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    profile_log.write(f"\n## {case.kernel_type}\n{out.getvalue()}\n")
    patch.unpatch()
    # On a shared CPU the fastest sample is the call's own cost (others add what the machine's
    # other work took from it); on the GPU's host, the median, as verify reports it.
    figure = "fastest_us" if stub else "median_us"
    us = {name: t[figure] for name, t in host.items()}
    return {"type": case.kernel_type, "calls": calls, "agrees": agrees, **us,
            "routing_us": us["routed"] - us["bare"]}


def _output_cell(agrees: bool | None) -> str:
    return "stub" if agrees is None else "ok" if agrees else "DIFFERS"


def _row_text(row: dict[str, Any]) -> str:
    return (f"| {row['type']} | {row['calls']} | {_output_cell(row['agrees'])} | "
            f"{row['eager']:.1f} | {row['routed']:.1f} | {row['bare']:.1f} | "
            f"{row['routing_us']:+.1f} |")


def _machine() -> str:
    if DEVICE.type == "cuda":
        return torch.cuda.get_device_name()
    return (f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
            f"stubbed kernels (the op entry's fake), thread CPU time, fastest of {CPU_ROUNDS} "
            f"samples of {CPU_CALLS} calls")


def main(argv: list[str] | None = None) -> int:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: stubbed kernels, the routing layer alone (default: cuda)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: route-host-cost.md (route-host-cost-cpu.md on the cpu)")
    parser.add_argument("--types", nargs="*", default=None)
    args = parser.parse_args(argv)
    DEVICE = torch.device(args.device)
    out_path = args.out or Path("route-host-cost.md" if args.device == "cuda"
                                else "route-host-cost-cpu.md")
    sizes = GPU_SIZES if args.device == "cuda" else CPU_SIZES
    cases = [c for c in _cases(sizes) if not args.types or c.kernel_type in args.types]
    profile_log = io.StringIO()
    rows = []
    header = ("| type | routed calls | output | eager µs | routed µs | bare µs | routing µs |\n"
              "|---|---|---|---|---|---|---|")
    print(header, flush=True)
    for case in cases:
        try:
            row = measure(case, profile_log)
        except Exception as exc:  # one broken case is a row, not the end of the table
            print(f"| {case.kernel_type} | failed: {type(exc).__name__}: {exc} |||||", flush=True)
            continue
        rows.append(row)
        print(_row_text(row), flush=True)
    versions = ", ".join(f"{k} {v}" for k, v in software_versions().items())
    text = (f"# Host cost of a routed call per kernel type\n\n{_machine()}; "
            f"{versions}; commit {source_commit()}; fp16; {sizes}; "
            f"`python -m autokernel.benchmarks route-host-cost --device {args.device}`\n\n"
            f"{header}\n"
            + "\n".join(_row_text(r) for r in rows) + "\n")
    out_path.write_text(text)
    out_path.with_suffix(".profile.txt").write_text(profile_log.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
