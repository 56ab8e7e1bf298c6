"""The correctness + anti-cheat + timing harness behind `autokernel bench` and every experiment.

- `runner.run_bench`: the API (and the harness process's side: format check, static scan, spawn,
  timeout, verdict, roofline, impossible-result quarantine, baseline cache).
- `spawn`: starting the worker (scrubbed environment, fork server or subprocess, timeout kill,
  output and report pipes).
- `static_scan`: the AST gate. `worker`: the only process that imports a candidate.
- `cases`: what the five stages feed it. `compare`: whether an output is right.
- `guards`: identity snapshot, launch monitor (ghost replay, stream checks), op recorder, poisoning.
- `probe`: the worker's self-test of those detectors. `timing`: the interleaved timing protocol.
- `protocol`: job and report between the two processes. `result`: the BenchResult contract.

Heavy modules (torch, triton) are imported by the submodules, not here.
"""
