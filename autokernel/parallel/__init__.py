"""Experiments judged on every GPU of a machine (`--gpus`), or of a Ray cluster (`--ray`).

One process, the head, owns the run's workspace: it asks the agent for candidates, hands each to
a worker, and records each verdict (git commit, results.tsv row, state.json) one at a time, in
the order verdicts come back, through the same journal as the one-GPU loop
(`autokernel.loop.journal`). A worker only judges: it gets a candidate's source and the target's
best kernel, runs the harness on its own GPU, and sends back the harness's and the keep rule's
verdict.

- `slots`: `--gpus all|N|0,2,3` resolved to workers, each pinned to its GPU with
  CUDA_VISIBLE_DEVICES and with NVLink multicast off;
- `worker`: what a worker runs (`JudgeWorker`), the same in a local process and a Ray actor;
- `local`: one worker process per GPU of this machine (concurrent.futures);
- `ray_backend`: one Ray actor per GPU of a cluster (`pip install autokernel[ray]`);
- `scheduler`: the head's loop (`ParallelRunner`): targets in parallel, one per GPU in order of
  share, then a target's candidates side by side when targets are fewer than GPUs;
- `board`: per-GPU progress for the dashboard, `.cache/gpus.json` and the report.

A worker that is lost (killed, its node preempted) costs its experiment in flight, which is
judged again on the restarted worker; the head itself dying costs the experiments in flight,
and `autokernel resume` goes on from the last recorded one.
"""
