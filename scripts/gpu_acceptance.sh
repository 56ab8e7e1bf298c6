#!/usr/bin/env bash
# One device call that checks and measures the foundation, the harness and the profiler on a GPU:
# the GPU-marked tests, the harness table of the starters, and the example-model profiles (the
# last two are benchmarks of the suite: `python -m autokernel.benchmarks --list`).
# Logs and tables go to $OUT (the device runner's output folder) or ./gpu-out.
#
#   COMMIT=<sha> scripts/gpu_acceptance.sh [tests|harness|profiles]...   (default: all three)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests harness profiles)

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  "$PYTHON" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
  # The device runner's copy carries a stale .git (the session's first HEAD), so git cannot
  # be asked: the caller names the commit.
  echo "commit ${COMMIT:-unknown (pass COMMIT=<sha>)}"; } | tee "$OUT/env.txt"

for step in "${steps[@]}"; do
  case $step in
    tests)
      # The per-op full-size tests are independent and mostly compile time: run them side by
      # side when pytest-xdist is there. The rest time things, so they run alone.
      parallel=()
      "$PYTHON" -c "import xdist" 2>/dev/null && parallel=(-n 6)
      op_tests=(tests/test_{matmul,fused_mlp,flash_attention,softmax,layernorm,rmsnorm}.py
                tests/test_{cross_entropy,rotary_embedding,reduce,gelu}.py
                tests/test_{add_rmsnorm,linear_cross_entropy,matmul_persistent_tma}.py)
      "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider --timeout 300 "${parallel[@]}" \
        "${op_tests[@]}" 2>&1 | tee "$OUT/gpu_op_tests.log" | tail -25
      others=()
      for f in tests/test_*.py; do [[ " ${op_tests[*]} " == *" $f "* ]] || others+=("$f"); done
      "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider --timeout 300 "${others[@]}" 2>&1 \
        | tee "$OUT/gpu_other_tests.log" | tail -25 ;;
    harness)
      "$PYTHON" -m autokernel.benchmarks harness-table --out "$OUT/harness-starters.md" 2>&1 \
        | tee "$OUT/harness.log" | tail -40 ;;
    profiles)
      "$PYTHON" -m autokernel.benchmarks profiles "$OUT/profiles" 2>&1 | tee "$OUT/profiles.log" \
        | tail -60
      tar -czf "$OUT/profiles.tar.gz" -C "$OUT" profiles && rm -rf "$OUT/profiles" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
