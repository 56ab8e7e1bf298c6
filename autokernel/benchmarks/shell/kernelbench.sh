#!/usr/bin/env bash
# `autokernel kernelbench` on a GPU, sized for one device call (at most 10 minutes): a few of
# examples/kernelbench's problems with a short budget each, the table printed at the end.
# The set runs in autokernel_runs/kernelbench-gpu (git-ignored); its results.md/.json/.tsv and
# logs/ are copied to $OUT (the device runner's output folder) when it is set.
#
#   COMMIT=<sha> python -m autokernel.benchmarks kernelbench [MINUTES_PER_PROBLEM] [PROBLEM.py...]
#
# A set larger than one call is chained: RESUME=1 continues the set already in SET_DIR (put the
# previous call's set.tar.gz back there), and STOP_AFTER_S=<seconds> interrupts the set cleanly
# (SIGINT: the problem in progress starts again on the next call) before the device call ends.
#
# Default: half a minute each for the softmax, layernorm, rope and sum-over-dim-1 problems
# (the last has no optimizable target: its row says so). Each problem also spends ~0.5-2 min
# on profiling and verify (torch.compile of the original and the patched model).
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
PYTHON=${PYTHON:-python3}
minutes=${1:-0.5}
shift $(( $# > 0 ? 1 : 0 ))
problems=("$@")
[ ${#problems[@]} -eq 0 ] && problems=(examples/kernelbench/{03_softmax_wide,07_layernorm,12_rope,04_sum_over_dim1}.py)
SET_DIR=autokernel_runs/kernelbench-gpu
resume_flag=()
if [[ "${RESUME:-0}" == 1 && -d "$SET_DIR" ]]; then
    resume_flag=(--resume)
else
    rm -rf "$SET_DIR"
fi
export PYTHONUNBUFFERED=1
# The copy on the device machine may carry a stale .git: the table's commit comes from $COMMIT.
timeout -s INT -k 30 "${STOP_AFTER_S:-100000}" \
  "$PYTHON" -m autokernel kernelbench "${problems[@]}" --device cuda --agent tuner \
  --minutes-per-problem "$minutes" --out "$SET_DIR" "${resume_flag[@]}"
status=$?
if [[ -n "${OUT:-}" ]]; then
    cp "$SET_DIR"/results.* "$OUT/" 2>/dev/null
    cp -r "$SET_DIR/logs" "$OUT/" 2>/dev/null
    tar -czf "$OUT/set.tar.gz" -C "$(dirname "$SET_DIR")" "$(basename "$SET_DIR")"
fi
echo "commit ${COMMIT:-unknown (pass COMMIT=<sha>)}"
cat "$SET_DIR/results.md" 2>/dev/null
exit $status
