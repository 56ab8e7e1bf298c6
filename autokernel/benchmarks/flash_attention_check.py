"""The flash_attention starter against SDPA on a GPU: correctness and device time, head dims
64-1024.

    python -m autokernel.benchmarks flash-attention-check [--quick] [--baseline-rev REV]
        [--wide-configs]
    python -m autokernel.benchmarks flash-attention-check --variants tiled,tma
        [--configs 'BLOCK_N=64;BLOCK_N=128,NUM_STAGES=2'] [--quick]

Grid: head dim D in 64/128/256/512/1024 x S in 1024/2048/4096 x causal and not x fp16/bf16, with
H·D = 2048 and B·S = 16384 (the FlashAttention papers' benchmark shapes), inputs from the op's own
generator ("normal"). For each case:

- ok: the starter's output on batch 0 against the op's upcast reference (fp32 on the GPU) at the
  op's tolerance; err/tol is the worst element's error over its allowance (<= 1 passes). SDPA's
  own err/tol at the same inputs is printed beside it, so a tolerance SDPA cannot meet shows.
- kernel_ms / sdpa_ms: triton.testing.do_bench medians (L2 cleared before each call); TFLOP/s by
  the registry's convention (causal counts the unmasked half); speedup = sdpa_ms / kernel_ms.
  SDPA picks its own backend: flash up to D = 256, memory-efficient or math beyond.

--quick: S = 2048 only. --baseline-rev REV: also time the starter as committed at REV (e.g. the
commit before the head-dim tiling, to check that D <= 256 did not slow down); it raises for
D > 256 there ("-"). --wide-configs: after the main table, time a few tunable settings of the
tiled path (BLOCK_DV, BLOCK_DK, NUM_WARPS) at D = 512 and 1024, S = 2048, fp16, to choose its
defaults (about two more minutes of compiling).

--variants V1,V2: instead of the grid above, compare the starter's VARIANTs (each with the file's
other tunables, or with each --configs setting: ';' between settings, ',' between NAME=VALUE
pairs, values as Python literals) beside SDPA on the resident head dims the tma variant serves:
D in 64/128/256 x S in 1024/2048/4096/8192 x causal and not x fp16/bf16, H = 32 heads and
B = max(1, 16384 / S) (B·H >= 64), each contestant checked on batch 0 as above. Compiles are per
(variant, config, D, dtype, causal); the S values share them. Two contestants take about 3-4
minutes on an H200; --quick (fp16, S 2048 and 8192) about a third of that. `ran` says which
kernel each plan launched (tma falls back to tiled where TMA cannot address the inputs).

Needs a CUDA GPU. The main grid takes about a minute on an H100, most of it compiling (20 kernels:
5 head dims x causal x dtype; the S values share each compiled kernel). Tables come last.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.testing

from autokernel.benchmarks.record import REPO
from autokernel.benchmarks.starters import load_file_as_module, starter_source_at
from autokernel.kernelfile import set_tunables
from autokernel.kernels import starter_path
from autokernel.ops import get_spec
from autokernel.ops.spec import dtype_name
from autokernel.versions import source_commit

DEVICE = "cuda"
SPEC = get_spec("flash_attention")
HEAD_DIMS = (64, 128, 256, 512, 1024)
SEQ_LENS = (1024, 2048, 4096)
DTYPES = (torch.float16, torch.bfloat16)
HEADS_TIMES_DIM = 2048
TOKENS = 16384  # B·S
WARMUP_MS, REP_MS = 10, 40
VARIANT_HEAD_DIMS = (64, 128, 256)
VARIANT_SEQ_LENS = (1024, 2048, 4096, 8192)
VARIANT_HEADS = 32
WIDE_CONFIGS = [{"BLOCK_DV": dv, "BLOCK_DK": dk, "NUM_WARPS": warps}
                for dv in (256, 512, 1024) for dk in (64, 128) for warps in (4, 8)]


def module_from_source(source: str, directory: Path, name: str) -> ModuleType:
    path = directory / f"{name}.py"
    path.write_text(source)
    return load_file_as_module(path, name)


def error_over_tolerance(out: torch.Tensor, oracle: torch.Tensor, dtype: torch.dtype) -> float:
    """The worst element's |out - oracle| / (atol + rtol·|oracle|); NaN counts as infinite."""
    tol = SPEC.tolerance(dtype)
    ratio = (out.float() - oracle).abs() / (tol.atol + tol.rtol * oracle.abs())
    return float(ratio.nan_to_num(float("inf")).max())


def device_ms(call: Callable[[], Any]) -> float:
    return float(triton.testing.do_bench(call, warmup=WARMUP_MS, rep=REP_MS,
                                         return_mode="median"))


def measure_case(shape: tuple[int, ...], dtype: torch.dtype, causal: bool,
                 contestants: dict[str, Callable[..., torch.Tensor]]) -> dict[str, Any]:
    q, k, v, causal, scale = SPEC.make_inputs(shape, dtype, DEVICE,
                                              torch.Generator(device=DEVICE).manual_seed(0),
                                              causal=causal)
    # Batch 0 against the reference in fp32 (the fp64 oracle would take longer than the timing).
    oracle = SPEC.reference(*(t[:1].float() for t in (q, k, v)), causal, scale)
    row: dict[str, Any] = {}

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
             scale: float | None) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    for name, fn in {"sdpa": sdpa, **contestants}.items():
        try:
            out = fn(q, k, v, causal, scale)
            row[f"{name}_err"] = error_over_tolerance(out[:1], oracle, dtype)
            row[f"{name}_ms"] = device_ms(lambda fn=fn: fn(q, k, v, causal, scale))
        except Exception as exc:  # noqa: BLE001 - one broken contestant must not end the table
            row[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return row


def tflops(shape: tuple[int, ...], causal: bool, ms: float) -> float:
    return SPEC.flops(shape, causal=causal) / (ms * 1e-3) / 1e12


def shape_for(head_dim: int, seq_len: int) -> tuple[int, int, int, int]:
    return (max(1, TOKENS // seq_len), max(1, HEADS_TIMES_DIM // head_dim), seq_len, head_dim)


def parse_configs(text: str | None) -> list[dict[str, Any]]:
    """'A=1,B=2;A=3' -> [{'A': 1, 'B': 2}, {'A': 3}]; values are Python literals (True, 'tma')."""
    if not text:
        return [{}]
    configs = []
    for setting in text.split(";"):
        config: dict[str, Any] = {}
        for pair in filter(None, (p.strip() for p in setting.split(","))):
            name, _, value = pair.partition("=")
            try:
                config[name.strip()] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                config[name.strip()] = value.strip()  # a bare word: a string tunable
        configs.append(config)
    return configs


def planned_kind(module: ModuleType, shape: tuple[int, ...], dtype: torch.dtype, causal: bool
                 ) -> str:
    """Which kernel the module's plan launches for contiguous inputs of this shape."""
    strides = torch.empty(0).new_empty(shape, device="meta").stride()
    launch = module._plan(shape, shape, shape, strides, strides, strides, (dtype,) * 3, causal,
                          None, torch.cuda.current_device())
    return "tma" if getattr(launch, "tma", False) else "tiled"


def compare_variants(variants: list[str], configs: list[dict[str, Any]], quick: bool,
                     scratch: Path, started: float) -> int:
    """Each variant x config beside SDPA on the resident head dims; a row per contestant and case,
    printed as it comes, the table last."""
    source = starter_path("flash_attention").read_text()
    modules: dict[str, ModuleType] = {}
    for variant in variants:
        for i, config in enumerate(configs):
            tunables = {"VARIANT": variant, **config}
            label = ",".join(f"{k}={v}" for k, v in tunables.items())
            modules[label] = module_from_source(set_tunables(source, tunables), scratch,
                                                f"fa_variant_{variant}_{i}")
    dtypes = (torch.float16,) if quick else DTYPES
    seq_lens = (2048, 8192) if quick else VARIANT_SEQ_LENS
    rows = []
    for head_dim in VARIANT_HEAD_DIMS:
        for dtype in dtypes:
            for causal in (True, False):
                for seq_len in seq_lens:
                    shape = (max(1, TOKENS // seq_len), VARIANT_HEADS, seq_len, head_dim)
                    row = measure_case(shape, dtype, causal,
                                       {label: m.kernel_fn for label, m in modules.items()})
                    for label, module in modules.items():
                        row[f"{label}_ran"] = planned_kind(module, shape, dtype, causal)
                        rows.append((shape, dtype, causal, label, row))
                        mine = {k.removeprefix(label + "_"): v for k, v in row.items()
                                if k.startswith(label + "_")}
                        print(f"{shape} {dtype_name(dtype)} causal={causal} {label}: {mine} "
                              f"sdpa_ms={row.get('sdpa_ms')}", flush=True)
                    torch.cuda.empty_cache()

    print(f"\nflash_attention variants vs SDPA, {torch.cuda.get_device_name()}, code "
          f"{source_commit(REPO)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.monotonic() - started:.0f} s")
    print("err: worst error / allowance on batch 0 vs the fp32 reference (<= 1 passes); "
          "ms: do_bench median; speedup = sdpa_ms / kernel_ms")
    for i, label in enumerate(modules):
        print(f"  [{i}] {label}")
    header = (f"{'B':>3s} {'H':>3s} {'S':>5s} {'D':>4s} {'dtype':5s} {'causal':6s} {'cfg':>3s} "
              f"{'ran':5s} {'ok':3s} {'err':>6s} {'kernel_ms':>9s} {'sdpa_ms':>8s} "
              f"{'kernel_TF':>9s} {'sdpa_TF':>8s} {'speedup':>7s}")
    print(header)
    print("-" * len(header))
    index = {label: i for i, label in enumerate(modules)}
    for shape, dtype, causal, label, row in rows:
        b, h, s, d = shape
        lead = (f"{b:3d} {h:3d} {s:5d} {d:4d} {dtype_name(dtype):5s} {causal!s:6s} "
                f"{index[label]:3d} {row[label + '_ran']:5s} ")
        error = row.get(f"{label}_error") or row.get("sdpa_error")
        if error:
            print(lead + f"ERR {error}")
            continue
        ms = row[f"{label}_ms"]
        ok = "yes" if row[f"{label}_err"] <= 1 else "NO"
        print(lead + f"{ok:3s} {row[label + '_err']:6.2f} {ms:9.3f} {row['sdpa_ms']:8.3f} "
              f"{tflops(shape, causal, ms):9.1f} {tflops(shape, causal, row['sdpa_ms']):8.1f} "
              f"{row['sdpa_ms'] / ms:7.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="S = 2048 only")
    parser.add_argument("--baseline-rev", help="also time the starter as committed at this rev")
    parser.add_argument("--wide-configs", action="store_true",
                        help="time tunable settings of the tiled path (D = 512, 1024)")
    parser.add_argument("--variants",
                        help="compare these VARIANTs (e.g. tiled,tma) beside SDPA at D <= 256")
    parser.add_argument("--configs",
                        help="with --variants: tunable settings tried for each variant, "
                             "e.g. 'BLOCK_N=64;BLOCK_N=128,NUM_WARPS=4,WARP_SPECIALIZE=True'")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="gpu_flash_attention_check_"))
    if args.variants:
        return compare_variants([v.strip() for v in args.variants.split(",") if v.strip()],
                                parse_configs(args.configs), args.quick, scratch, started)
    starter = load_file_as_module(starter_path("flash_attention"), "flash_attention_starter")
    contestants: dict[str, Callable[..., torch.Tensor]] = {"kernel": starter.kernel_fn}
    if args.baseline_rev:
        source = starter_source_at(args.baseline_rev, "flash_attention")
        if source is None:
            print(f"no starter at {args.baseline_rev}", file=sys.stderr)
            return 2
        tag = re.sub(r"\W", "_", args.baseline_rev)
        contestants["base"] = module_from_source(source, scratch, f"fa_at_{tag}").kernel_fn

    rows = []
    for head_dim in HEAD_DIMS:
        for seq_len in (2048,) if args.quick else SEQ_LENS:
            for dtype in DTYPES:
                for causal in (True, False):
                    shape = shape_for(head_dim, seq_len)
                    row = measure_case(shape, dtype, causal, contestants)
                    rows.append((shape, dtype, causal, row))
                    print(f"{shape} {dtype_name(dtype)} causal={causal}: {row}", flush=True)
                    torch.cuda.empty_cache()

    wide_rows = []
    if args.wide_configs:
        for head_dim in (512, 1024):
            shape = shape_for(head_dim, 2048)
            for i, tunables in enumerate(WIDE_CONFIGS):
                source = set_tunables(starter_path("flash_attention").read_text(), tunables)
                module = module_from_source(source, scratch, f"fa_wide_{head_dim}_{i}")
                for causal in (False, True):
                    row = measure_case(shape, torch.float16, causal, {"kernel": module.kernel_fn})
                    wide_rows.append((shape, causal, tunables, row))
                    print(f"{shape} {tunables} causal={causal}: {row}", flush=True)

    print(f"\nflash_attention starter vs SDPA, {torch.cuda.get_device_name()}, code "
          f"{source_commit(REPO)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.monotonic() - started:.0f} s")
    print("err: worst error / allowance on batch 0 vs the fp32 reference (<= 1 passes); "
          "ms: do_bench median; speedup = sdpa_ms / kernel_ms")
    base = "base" in contestants
    header = (f"{'B':>3s} {'H':>3s} {'S':>5s} {'D':>5s} {'dtype':5s} {'causal':6s} "
              f"{'ok':3s} {'err':>6s} {'sdpa_err':>8s} {'kernel_ms':>9s} {'sdpa_ms':>8s} "
              f"{'kernel_TF':>9s} {'sdpa_TF':>8s} {'speedup':>7s}"
              + (f" {'base_ms':>8s} {'vs_base':>7s}" if base else ""))
    print(header)
    print("-" * len(header))
    for shape, dtype, causal, row in rows:
        b, h, s, d = shape
        lead = f"{b:3d} {h:3d} {s:5d} {d:5d} {dtype_name(dtype):5s} {causal!s:6s} "
        if "kernel_error" in row or "sdpa_error" in row:
            print(lead + f"ERR {row.get('kernel_error') or row['sdpa_error']}")
            continue
        ok = "yes" if row["kernel_err"] <= 1 else "NO"
        line = (lead + f"{ok:3s} {row['kernel_err']:6.2f} {row['sdpa_err']:8.2f} "
                f"{row['kernel_ms']:9.3f} {row['sdpa_ms']:8.3f} "
                f"{tflops(shape, causal, row['kernel_ms']):9.1f} "
                f"{tflops(shape, causal, row['sdpa_ms']):8.1f} "
                f"{row['sdpa_ms'] / row['kernel_ms']:7.2f}")
        if base:
            line += (f" {row['base_ms']:8.3f} {row['base_ms'] / row['kernel_ms']:7.2f}"
                     if "base_ms" in row else f" {'-':>8s} {'-':>7s}")
        print(line)
    if wide_rows:
        print("\nTiled path (D > 256) tunables, fp16, S = 2048")
        print(f"{'D':>5s} {'causal':6s} {'BLOCK_DV':>8s} {'BLOCK_DK':>8s} {'warps':>5s} "
              f"{'ok':3s} {'kernel_ms':>9s} {'kernel_TF':>9s} {'speedup':>7s}")
        for shape, causal, tunables, row in wide_rows:
            lead = (f"{shape[3]:5d} {causal!s:6s} {tunables['BLOCK_DV']:8d} "
                    f"{tunables['BLOCK_DK']:8d} {tunables['NUM_WARPS']:5d} ")
            if "kernel_error" in row or "sdpa_error" in row:
                print(lead + f"ERR {row.get('kernel_error') or row['sdpa_error']}")
                continue
            ok = "yes" if row["kernel_err"] <= 1 else "NO"
            print(lead + f"{ok:3s} {row['kernel_ms']:9.3f} "
                  f"{tflops(shape, causal, row['kernel_ms']):9.1f} "
                  f"{row['sdpa_ms'] / row['kernel_ms']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
