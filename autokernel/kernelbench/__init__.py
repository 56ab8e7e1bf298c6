"""`autokernel kernelbench`: a set of KernelBench-style problems through profile → run → verify.

Each problem file follows KernelBench's convention (`class Model`, `get_inputs()`, optional
`get_init_inputs()`); each gets its own workspace, child process and time budget. The result is a
table per problem (correctness and end-to-end speedups from verify, the targets optimized, or
why there was nothing to do) and KernelBench's fast_p over the set, against eager PyTorch and
against torch.compile.

- `scoring`: fast_p (a pure function) and its table;
- `problem`: one problem's stages, in the child process;
- `suite`: the set, one child per problem, never stopped by one problem's failure;
- `table`: results.md, results.json, results.tsv.
"""

from autokernel.kernelbench.scoring import fast_p, fast_p_table, is_fast

__all__ = ["fast_p", "fast_p_table", "is_fast"]
