#!/usr/bin/env bash
# In-context selection on a GPU, as a user runs it: a short `autokernel run` on a model, then
# `autokernel verify` (the ablation per mode, the deliveries, the chosen one), `autokernel
# report`, and the exported module's optimize(model). Optionally first the Inductor test of
# every kernel type as a triton_op. Everything lands in $OUT (the device runner's output
# folder) or ./gpu-out, each step's log written as it runs.
#
#   COMMIT=<sha> python -m autokernel.benchmarks in-context MODEL HOURS ONLY [VERIFY_BUDGET] [tests]
#
# MODEL: a model file (examples/models/... or a KernelBench problem); HOURS: the run's --hours;
# ONLY: the run's --only list ("" for the plan's top targets); VERIFY_BUDGET: verify's --budget
# (seconds of timing per batch, default 6); "tests" as the fifth argument runs the GPU tests of
# tests/test_triton_ops.py first.
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
MODEL=$1
HOURS=$2
ONLY=${3:-}
BUDGET=${4:-6}
NAME=$(basename "$MODEL" .py)
RUN=runs/$NAME

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PYTHON" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
  echo "commit ${COMMIT:-unknown (pass COMMIT=<sha>)}"; date -u; } | tee -a "$OUT/env.txt"

if [[ "${5:-}" == tests ]]; then
  "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider --timeout 300 -n 4 tests/test_triton_ops.py \
    2>&1 | tee "$OUT/triton_ops.log" | tail -40
fi

only=()
[[ -n "$ONLY" ]] && only=(--only "$ONLY")
echo "== autokernel run $MODEL --hours $HOURS ${only[*]}"
"$PYTHON" -m autokernel run "$MODEL" --hours "$HOURS" "${only[@]}" --out "$RUN" --no-live \
  2>&1 | tee "$OUT/$NAME-run.log" | tail -25
echo "== autokernel verify $RUN --budget $BUDGET"
COLUMNS=160 "$PYTHON" -m autokernel verify "$RUN" --budget "$BUDGET" 2>&1 \
  | tee "$OUT/$NAME-verify.log"
COLUMNS=160 "$PYTHON" -m autokernel report "$RUN" > "$OUT/$NAME-report.log" 2>&1
echo "== the exported module's optimize(model), as a user calls it"
"$PYTHON" -m autokernel export "$RUN" --to "$RUN/exported_kernels.py" 2>&1 | tail -2
"$PYTHON" - "$RUN" "$MODEL" <<'PY' 2>&1 | tee "$OUT/$NAME-optimize.log"
import importlib.util, sys, time
from pathlib import Path

import torch

run, model_file = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(run))
import exported_kernels

spec = importlib.util.spec_from_file_location("user_model", model_file)
user = importlib.util.module_from_spec(spec)
sys.modules["user_model"] = user  # as an import would: dataclasses look their module up
spec.loader.exec_module(user)
torch.manual_seed(0)
model = user.Model(*getattr(user, "get_init_inputs", lambda: [])()).cuda().half().eval()
inputs = [x.cuda().half() if x.is_floating_point() else x.cuda() for x in user.get_inputs()]
with torch.no_grad():
    expected = model(*inputs)
    fast = exported_kernels.optimize(model)
    out = fast(*inputs)
    torch.cuda.synchronize()
    error = (out.float() - expected.float()).norm() / expected.float().norm()
    print(f"delivery {fast.delivery.label}: relative difference to eager {error.item():.2e}")
PY
cp "$RUN/verify.json" "$OUT/$NAME-verify.json" 2>/dev/null
tar -czf "$OUT/$NAME-run.tar.gz" --exclude='*.pyc' "$RUN" 2>/dev/null
echo "== done"
