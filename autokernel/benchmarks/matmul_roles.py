"""The matmul starter at each matmul role's shapes, in the layouts models hand it, against torch.

    python -m autokernel.benchmarks matmul-roles [--dtype fp16] [--out DIR]
    python -m autokernel.benchmarks matmul-roles --smoke   # CPU interpreter, tiny shapes, no timing
    python -m autokernel.benchmarks matmul-roles --tunables VARIANT=persistent_tma,WARP_SPECIALIZE=1

Rows: a 4096³ square product, the mistral_decoder example's projections (2048 tokens), linear
layers (KernelBench 44's 65536x3072x768 and its down projection, a decode GEMM),
batched products (minGPT's q @ kᵀ and P @ V on views of one fused qkv projection, 128 x 8 heads
of 512 x 96; GPT-2-sized scores; a contiguous torch.bmm) and a tiny problem where host launch
cost decides. For each: the starter's and torch.matmul's device time (`triton.testing.do_bench`,
median, L2 cleared between calls), their ratio, the host time of one call (the Python call until
it returns, launches queued asynchronously; the mean over 200 calls after warm-up) and the
starter's error against torch in float64 (max |diff| / max |ref|).

Prints a markdown table last, labelled with the commit (`autokernel.versions.source_commit`);
with --out also writes matmul_roles.md and matmul_roles.json there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

Case = tuple[str, str, Callable[[], tuple[torch.Tensor, torch.Tensor]]]


def fused_qkv(batch: int, seq: int, heads: int, head_dim: int, dtype: torch.dtype,
              device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v [batch, heads, seq, head_dim]: views of one [batch, seq, 3 * d] projection."""
    d = heads * head_dim
    qkv = (torch.randn(batch, seq, 3 * d, device=device) / head_dim ** 0.25).to(dtype)
    return tuple(t.view(batch, seq, heads, head_dim).transpose(1, 2) for t in qkv.split(d, -1))


def cases(dtype: torch.dtype, device: str, scale: int) -> list[Case]:
    """(role, description, make(inputs)) per row; `scale` divides every size (smoke runs)."""
    def s(n: int) -> int:
        return max(1, n // scale)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device).to(dtype)

    def weight_t(n: int, k: int) -> torch.Tensor:  # what a routed nn.Linear hands over: Wᵀ
        return (torch.randn(n, k, device=device) / k ** 0.5).to(dtype).t().contiguous()

    def scores() -> tuple[torch.Tensor, torch.Tensor]:
        q, k, _ = fused_qkv(s(128), s(512), 8, s(96), dtype, device)
        return q, k.transpose(-2, -1)

    def values() -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = fused_qkv(s(128), s(512), 8, s(96), dtype, device)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1), v

    def gpt2_scores() -> tuple[torch.Tensor, torch.Tensor]:
        q, k, _ = fused_qkv(s(16), s(1024), 16, s(64), dtype, device)
        return q, k.transpose(-2, -1)

    return [
        ("square", "[4096, 4096] @ [4096, 4096]",
         lambda: (r(s(4096), s(4096)), r(s(4096), s(4096)) / s(4096) ** 0.5)),
        ("linear", "x[2048, 2048] @ Wᵀ, N 2048 (mistral_decoder q/o projection)",
         lambda: (r(s(2048), s(2048)), weight_t(s(2048), s(2048)))),
        ("linear", "x[2048, 2048] @ Wᵀ, N 5632 (mistral_decoder gate/up)",
         lambda: (r(s(2048), s(2048)), weight_t(s(5632), s(2048)))),
        ("linear", "x[2048, 5632] @ Wᵀ, N 2048 (mistral_decoder down)",
         lambda: (r(s(2048), s(5632)), weight_t(s(2048), s(5632)))),
        ("linear", "x[65536, 768] @ Wᵀ, N 3072 (minGPT c_fc)",
         lambda: (r(s(65536), s(768)), weight_t(s(3072), s(768)))),
        ("linear", "x[65536, 3072] @ Wᵀ, N 768 (minGPT c_proj)",
         lambda: (r(s(65536), s(3072)), weight_t(s(768), s(3072)))),
        ("linear", "x[16, 4096] @ Wᵀ, N 4096 (decode)",
         lambda: (r(16, s(4096)), weight_t(s(4096), s(4096)))),
        ("batched", "q @ kᵀ, [128, 8, 512, 96] views of qkv", scores),
        ("batched", "P @ v, [128, 8, 512, 512] @ view", values),
        ("batched", "q @ kᵀ, [16, 16, 1024, 64] views of qkv", gpt2_scores),
        ("batched", "bmm [64, 512, 2048] @ [64, 2048, 1024]",
         lambda: (r(s(64), s(512), s(2048)), r(s(64), s(2048), s(1024)) / s(2048) ** 0.5)),
        ("launch", "tiny: [8, 16, 16] @ [8, 16, 16]", lambda: (r(8, 16, 16), r(8, 16, 16))),
    ]


def host_us(fn: Callable[[], object], calls: int = 200) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def relative_error(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.double() @ b.double()
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def parse_tunables(text: str) -> dict[str, object]:
    """'A=1,B=x' -> {'A': 1, 'B': 'x'}: integers as ints, 0/1 and true/false as they read."""
    out: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        lowered = value.strip().lower()
        out[name.strip()] = (True if lowered == "true" else False if lowered == "false"
                             else int(value) if value.strip().lstrip("-").isdigit() else value.strip())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    parser.add_argument("--tunables", default="",
                        help="NAME=VALUE,... set on the starter before its first call "
                             "(e.g. VARIANT=persistent_tma); one setting per process")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2

    from autokernel.kernels import matmul as starter
    from autokernel.ops.spec import parse_dtype
    from autokernel.versions import source_commit

    tunables = parse_tunables(args.tunables)
    for name, value in tunables.items():
        setattr(starter, name, value)
    dtype = parse_dtype(args.dtype)
    device, scale = ("cpu", 16) if args.smoke else ("cuda", 1)
    rows = []
    for role, description, make in cases(dtype, device, scale):
        a, b = make()
        out = starter.kernel_fn(a, b)
        row = {"role": role, "case": description, "dtype": args.dtype,
               "shape": f"{tuple(a.shape)} @ {tuple(b.shape)}",
               "rel_error": relative_error(out, a, b)}
        if not args.smoke:
            from triton.testing import do_bench

            row["starter_ms"] = do_bench(lambda: starter.kernel_fn(a, b), return_mode="median")
            row["torch_ms"] = do_bench(lambda: torch.matmul(a, b), return_mode="median")
            row["speedup"] = row["torch_ms"] / row["starter_ms"]
            row["starter_host_us"] = host_us(lambda: starter.kernel_fn(a, b))
            row["torch_host_us"] = host_us(lambda: torch.matmul(a, b))
        rows.append(row)
        print(json.dumps(row), flush=True)

    commit = source_commit(Path(__file__).resolve().parents[2])
    where = "CPU interpreter (smoke: no timing)" if args.smoke else torch.cuda.get_device_name()
    setting = ", ".join(f"{k}={v}" for k, v in tunables.items()) or "the starter's defaults"
    lines = [f"matmul starter by role, {args.dtype} on {where}, commit {commit}, "
             f"torch {torch.__version__}; {setting}", "",
             "| role | case | starter ms | torch ms | vs torch | host µs starter / torch | "
             "rel. error |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        timed = "starter_ms" in row
        lines.append(
            f"| {row['role']} | {row['case']} | "
            + (f"{row['starter_ms']:.3f} | {row['torch_ms']:.3f} | {row['speedup']:.2f}x | "
               f"{row['starter_host_us']:.1f} / {row['torch_host_us']:.1f}" if timed
               else "– | – | – | –")
            + f" | {row['rel_error']:.1e} |")
    table = "\n".join(lines)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "matmul_roles.md").write_text(table + "\n")
        (args.out / "matmul_roles.json").write_text(json.dumps(
            {"commit": commit, "device": where, "rows": rows}, indent=2) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
