#!/usr/bin/env bash
# A 20-minute tuner run on a LLaMA-style model (fp16; default examples/models/llama_7b_layers.py, 7B
# layer shapes at an 8192-token prefill: realistic sizes) on one H100/H200, in chunks of at most
# ~9.5 minutes so that each chunk fits a 10-minute command limit:
#
#   python -m autokernel.benchmarks tuner-run [RUN_DIR]  # first call: profile + run; later calls: resume
#
# Call it again until it prints "run finished". Each chunk stops the loop with SIGTERM (the loop
# finishes the experiment in progress and saves its state; `autokernel resume` continues it), so
# the run's 20 minutes are counted in active time across chunks. When the run is finished it
# writes RUN_DIR/report/tuner-run.md (per-target speedups vs eager and torch.compile, experiments per
# hour, harness time per experiment, GPU, versions, commit).
#
# If $OUT is set (the device runner's output folder), each chunk also copies results.tsv,
# state.json, the summary and a tarball of RUN_DIR there. RUN_DIR must survive between chunks:
# on a machine that is released between calls, extract the tarball back to RUN_DIR (and carry it)
# before the next call.
#
# Environment: MODEL, HOURS (default 0.3333), CHUNK_SECONDS (default 540), TOP (default 8),
# PYTHON (default: python), EXTRA_ARGS (passed to `autokernel run`).
set -euo pipefail

RUN_DIR=${1:-autokernel_runs/gpu-tuner-llama}
MODEL=${MODEL:-examples/models/llama_7b_layers.py}
HOURS=${HOURS:-0.3333}
CHUNK_SECONDS=${CHUNK_SECONDS:-540}
TOP=${TOP:-8}
PYTHON=${PYTHON:-python}
cd "$(dirname "$0")/../../.."  # the repository root

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true

status=0
if [[ ! -f "$RUN_DIR/state.json" ]]; then
    echo "== starting a ${HOURS} h tuner run in $RUN_DIR"
    # shellcheck disable=SC2086
    timeout -s TERM -k 60 "$CHUNK_SECONDS" "$PYTHON" -m autokernel run "$MODEL" \
        --device cuda --dtype fp16 --agent tuner --hours "$HOURS" --top "$TOP" \
        --out "$RUN_DIR" --no-live ${EXTRA_ARGS:-} || status=$?
else
    echo "== resuming $RUN_DIR"
    timeout -s TERM -k 60 "$CHUNK_SECONDS" "$PYTHON" -m autokernel resume "$RUN_DIR" \
        --no-live || status=$?
fi
# 130: stopped by the chunk's SIGTERM (resumable); 0: finished; anything else is a failure.
if [[ $status -ne 0 && $status -ne 130 && $status -ne 124 ]]; then
    echo "autokernel exited with status $status" >&2
    exit "$status"
fi

finished=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['finished'])" \
    "$RUN_DIR/state.json")
if [[ "$finished" == "True" ]]; then
    mkdir -p "$RUN_DIR/report"
    "$PYTHON" -m autokernel.benchmarks tuner-run-summary "$RUN_DIR" > "$RUN_DIR/report/tuner-run.md"
    cat "$RUN_DIR/report/tuner-run.md"
    echo "run finished"
else
    echo "chunk done; call again to continue"
fi

if [[ -n "${OUT:-}" ]]; then
    cp "$RUN_DIR/results.tsv" "$RUN_DIR/state.json" "$OUT/"
    [[ -f "$RUN_DIR/report/tuner-run.md" ]] && cp "$RUN_DIR/report/tuner-run.md" "$OUT/"
    # Without the compile caches (large, and rebuilt on demand); the baseline timings stay.
    tar -czf "$OUT/run_dir.tar.gz" --exclude='.cache/harness/triton' \
        --exclude='.cache/harness/inductor' -C "$(dirname "$RUN_DIR")" "$(basename "$RUN_DIR")"
fi
