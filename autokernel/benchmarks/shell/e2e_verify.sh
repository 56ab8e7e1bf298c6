#!/usr/bin/env bash
# After the tuner run on examples/models/llama.py (`python -m autokernel.benchmarks tuner-run`), on the same
# H100/H200: splice its finished kernels into the model and measure end to end, then write the
# report, and collect the figures under docs/benchmarks/e2e-llama/:
#
#   python -m autokernel.benchmarks e2e-verify [RUN_DIR] [DOCS_DIR]
#
# RUN_DIR: the run's workspace (default autokernel_runs/gpu-tuner-llama, tuner-run's), or
# the run_dir.tar.gz that tuner-run left in $OUT (extracted next to this checkout first).
# DOCS_DIR: default docs/benchmarks/e2e-llama. It receives
#   README.md     GPU, versions, commit; end-to-end speedup vs eager and vs torch.compile with
#                 the Amdahl estimate beside it; accuracy; what was routed, with each backward
#   report.md     the run's report (per-target figures, end to end, details)
#   progress.png  speedup vs experiment number per target, kept experiments marked
#   verify.json   everything verify measured
# and, when $OUT is set (the device runner's output folder), the same files are copied there.
#
# Environment: PYTHON (default: python), VERIFY_ARGS (extra `autokernel verify` options, e.g.
# "--budget 40"). Verify compiles the original and the patched model (a minute or two each for
# the compact LLaMA) and times all four for --budget seconds (default 20).
set -euo pipefail

RUN_DIR=${1:-autokernel_runs/gpu-tuner-llama}
DOCS_DIR=${2:-docs/benchmarks/e2e-llama}
PYTHON=${PYTHON:-python}
cd "$(dirname "$0")/../../.."  # the repository root

if [[ -f "$RUN_DIR" && "$RUN_DIR" == *.tar.gz ]]; then
    mkdir -p autokernel_runs
    name=$(tar -tzf "$RUN_DIR" | awk -F/ 'NR == 1 {print $1}')  # awk reads to the end: no SIGPIPE under pipefail
    tar -xzf "$RUN_DIR" -C autokernel_runs
    RUN_DIR="autokernel_runs/$name"
    echo "== extracted the run to $RUN_DIR"
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true

echo "== autokernel verify $RUN_DIR"
status=0
# shellcheck disable=SC2086
"$PYTHON" -m autokernel verify "$RUN_DIR" --device cuda --compile ${VERIFY_ARGS:-} || status=$?
# 1: the patched model is out of tolerance (still worth collecting); 2 or more: no verify.json.
if [[ $status -ge 2 ]]; then
    echo "autokernel verify exited with status $status" >&2
    exit "$status"
fi

echo "== autokernel report $RUN_DIR"
COLUMNS=160 "$PYTHON" -m autokernel report "$RUN_DIR"

mkdir -p "$DOCS_DIR"
cp "$RUN_DIR/report.md" "$RUN_DIR/progress.png" "$RUN_DIR/verify.json" "$DOCS_DIR/"
"$PYTHON" - "$RUN_DIR" "$DOCS_DIR/README.md" <<'PY'
import json
import sys
from pathlib import Path

from autokernel.integrate.verify import end_to_end_lines
from autokernel.versions import source_commit

run_dir, readme = Path(sys.argv[1]), Path(sys.argv[2])
result = json.loads((run_dir / "verify.json").read_text())
commit = source_commit()
versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
accuracy = result["accuracy"]
lines = [
    f"# End to end: {result['run']} on {result['gpu'] or result['device']}",
    "",
    f"`autokernel verify` of the tuner run on `{result['model']}` ({result['dtype']}), "
    f"autokernel commit {commit}; {versions}.",
    "",
    "```",
    *end_to_end_lines(result),
    "```",
    "",
    f"Output {'PASS' if accuracy['passed'] else 'FAIL'}: relative error against the "
    f"{accuracy['oracle']} oracle {accuracy['error_patched']:.2e} patched, "
    f"{accuracy['error_original']:.2e} original (bound {accuracy['bound']:.2e}).",
]
gradients = result.get("gradients", {})
if gradients.get("checked"):
    lines.append(f"Gradients {'PASS' if gradients['passed'] else 'FAIL'}: relative error "
                 f"{gradients['error_patched']:.2e} patched, {gradients['error_original']:.2e} "
                 f"original (bound {gradients['bound']:.2e}).")
lines += ["", "| kernel | share | kernel speedup vs eager | routed | calls/forward | "
          "left to PyTorch | backward |", "|---|---|---|---|---|---|---|"]
for row in result["kernels"]:
    where = (f"{len(row['modules'])} modules" if row["modules"]
             else ", ".join(p or "the model" for p in row["scopes"]))
    left = "; ".join(f"{r} ×{n}" for r, n in row["fallbacks"].items()) or "–"
    speed = f"{row['speedup_vs_eager']:.2f}×" if row["speedup_vs_eager"] else "–"
    lines.append(f"| {row['tag']} | {row['share'] * 100:.1f}% | {speed} | {where} | "
                 f"{row['calls_per_forward']} | {left} | {row['backward_description']} |")
lines += ["", "Per-target figures: [report.md](report.md). Progress:", "",
          "![progress](progress.png)", ""]
readme.write_text("\n".join(lines))
print(readme.read_text())
PY

if [[ -n "${OUT:-}" ]]; then
    cp "$DOCS_DIR"/README.md "$DOCS_DIR"/report.md "$DOCS_DIR"/progress.png \
        "$DOCS_DIR"/verify.json "$OUT/"
fi
echo "collected in $DOCS_DIR (commit it)"
