"""The benchmark suite behind the figures in docs/benchmarks: `python -m autokernel.benchmarks
NAME [ARGS...]` runs one (`--list` names them all, with the records each made).

One module per benchmark, its `main(argv) -> int` taking the benchmark's own options; the few
that drive the `autokernel` CLI step by step on a device machine are bash scripts in `shell/`.
`registry.BENCHMARKS` is the list; `record.environment` is what every run records beside its
output (GPU, versions, commit). Nothing else in the package imports this one.
"""
