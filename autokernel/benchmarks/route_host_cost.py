"""Host cost of a routed call, per kernel type: what `patch(model)` adds over the bare launch.

    python -m autokernel.benchmarks route-host-cost [--out FILE.md] [--types rmsnorm softmax ...]

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
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.end_to_end import time_host
from autokernel.integrate.loader import verified_params
from autokernel.integrate.patch import build_kernels, patch_model
from autokernel.kernels import starter_path
from autokernel.ops import get_integration, get_spec
from autokernel.ops.spec import dtype_name
from autokernel.reference import REFERENCES
from autokernel.versions import software_versions, source_commit

DTYPE = torch.float16
DEVICE = torch.device("cuda")
ROUNDS = 30


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


def _cases() -> list[Case]:
    d, rows = 2048, 32
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
             lambda: (_randn(rows, 32000), torch.randint(0, 32000, (rows,), device=DEVICE)),
             lambda m, k, a: lambda: k(*a)),
        Case("flash_attention",
             lambda: Call(lambda self, q, k, v: F.scaled_dot_product_attention(
                 q, k, v, is_causal=True)),
             lambda: tuple(_randn(1, 16, 128, 64) for _ in "qkv"),
             lambda m, k, a: lambda: k(*a, True, None), params={"causal": True}),
        Case("matmul", lambda: nn.Linear(d, d, bias=False), lambda: (_randn(rows, d),),
             lambda m, k, a: (lambda wt=m.weight.t().contiguous(): lambda: k(a[0], wt))(),
             role="linear"),
        Case("fused_mlp", lambda: SwiGLU(d, 5632), lambda: (_randn(rows, d),),
             lambda m, k, a: lambda: k(a[0], m.gate.weight, m.up.weight, m.down.weight, "silu"),
             params={"activation": "silu"}),
        Case("rotary_embedding", lambda: Rotary(128, 64),
             lambda: (_randn(1, 16, 128, 64), _randn(1, 16, 128, 64)),
             lambda m, k, a: (lambda c=m.cos_cached.to(DTYPE), s=m.sin_cached.to(DTYPE):
                              lambda: (k(a[0], c, s), k(a[1], c, s)))()),
        Case("add_rmsnorm", lambda: AddNorm(nn.RMSNorm(d, eps=1e-6)),
             lambda: (_randn(rows, d), _randn(rows, d)),
             lambda m, k, a: lambda: k(a[0], a[1], m.norm.weight, 1e-6), params={"eps": 1e-6}),
        Case("add_layernorm", lambda: AddNorm(nn.LayerNorm(d)),
             lambda: (_randn(rows, d), _randn(rows, d)),
             lambda m, k, a: lambda: k(a[0], a[1], m.norm.weight, m.norm.bias, 1e-5),
             params={"eps": 1e-5}),
        Case("linear_cross_entropy", lambda: Head(d, 32000),
             lambda: (_randn(rows, d), torch.randint(0, 32000, (rows,), device=DEVICE)),
             lambda m, k, a: lambda: k(a[0], m.lm_head.weight, a[1])),
    ]


def _kernel(case: Case) -> Any:
    spec = get_spec(case.kernel_type)
    entry = {"tag": f"01_{case.kernel_type}", "kernel_type": case.kernel_type, "role": case.role,
             "dtypes": [dtype_name(DTYPE)],
             "params": verified_params(case.kernel_type, dict(case.params or {})),
             "sites": [""],  # the one-op module itself, as the profiler would name it
             "tolerances": {dtype_name(d): [t.atol, t.rtol] for d, t in spec.tolerances.items()},
             "limits": {}, "shape": []}
    source = starter_path(case.kernel_type).read_text()
    integration = {case.kernel_type: get_integration(case.kernel_type)}
    [kernel] = build_kernels([entry], {entry["tag"]: source}, REFERENCES, integration, "cuda",
                             "route_host_cost")
    return kernel


def measure(case: Case, profile_log: io.StringIO) -> dict[str, Any]:
    torch.manual_seed(0)
    eager = case.module().to(DEVICE, DTYPE).eval()
    patched = case.module().to(DEVICE, DTYPE).eval()
    patched.load_state_dict(eager.state_dict())
    kernel = _kernel(case)
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
        agrees = torch.allclose(first(got).float(), first(expected).float(), atol=2e-2,
                                rtol=2e-2)
        for fn in contestants.values():
            fn()
        torch.cuda.synchronize()
        host = time_host(contestants, DEVICE, ROUNDS)["contestants"]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            patched(*inputs)
        profiler.disable()
        torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    profile_log.write(f"\n## {case.kernel_type}\n{out.getvalue()}\n")
    patch.unpatch()
    us = {name: t["median_us"] for name, t in host.items()}
    return {"type": case.kernel_type, "calls": calls, "agrees": agrees, **us,
            "routing_us": us["routed"] - us["bare"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("route-host-cost.md"))
    parser.add_argument("--types", nargs="*", default=None)
    args = parser.parse_args(argv)
    cases = [c for c in _cases() if not args.types or c.kernel_type in args.types]
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
        print(f"| {row['type']} | {row['calls']} | {'ok' if row['agrees'] else 'DIFFERS'} | "
              f"{row['eager']:.1f} | {row['routed']:.1f} | {row['bare']:.1f} | "
              f"{row['routing_us']:+.1f} |", flush=True)
    versions = ", ".join(f"{k} {v}" for k, v in software_versions().items())
    text = (f"# Host cost of a routed call per kernel type\n\n{torch.cuda.get_device_name()}; "
            f"{versions}; commit {source_commit()}; fp16; "
            f"`python -m autokernel.benchmarks route-host-cost`\n\n{header}\n" + "\n".join(
                f"| {r['type']} | {r['calls']} | {'ok' if r['agrees'] else 'DIFFERS'} | "
                f"{r['eager']:.1f} | {r['routed']:.1f} | {r['bare']:.1f} | "
                f"{r['routing_us']:+.1f} |" for r in rows) + "\n")
    args.out.write_text(text)
    args.out.with_suffix(".profile.txt").write_text(profile_log.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
