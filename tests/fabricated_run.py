"""A finished run without the loop, for verify tests on models the loop need not optimize.

The model is profiled on the CPU (the real profiler and plan, its splice column asked of verify's
routes as `autokernel run` asks it), and every target is marked done
with its op's starter as the kernel: each starter passes the harness in its own tests, so the run
looks like one whose agent kept the baseline. A minute of `autokernel run` per model becomes a
second.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from autokernel.kernels import starter_path
from autokernel.loop.state import RunState, TargetState
from autokernel.profiling.model_loader import load_model_file
from autokernel.profiling.plan import Plan
from autokernel.profiling.session import profile_plan


def fabricate_run(model_file: Path, root: Path, dtype: str = "fp32",
                  class_name: str = "Model") -> tuple[Path, Plan]:
    """A run directory at `root` with every target of the model's CPU plan finished."""
    loaded = load_model_file(model_file, class_name=class_name, dtype=dtype, device="cpu")
    _, plan = profile_plan(loaded, model=str(model_file), class_name=class_name, warmup=1,
                           iters=1, compiled=False)
    (root / "model").mkdir(parents=True)
    (root / "kernels").mkdir()
    shutil.copy2(model_file, root / "model" / model_file.name)
    targets = []
    for index, target in enumerate(plan.targets):
        tag = f"{target.rank:02d}_{target.kernel_type}"
        kernel = f"kernels/{tag}.py"
        shutil.copy2(starter_path(target.kernel_type), root / kernel)
        targets.append(TargetState(index=index, rank=target.rank, kernel_type=target.kernel_type,
                                   tag=tag, status="done", kernel_file=kernel))
    plan.save(root / "plan.json")
    RunState(run_tag="fabricated", branch="autokernel/fabricated", head="0" * 40,
             targets=targets, finished=True).save(root / "state.json")
    (root / "run.json").write_text(json.dumps({
        "run_tag": "fabricated", "model": str(model_file),
        "model_copy": f"model/{model_file.name}", "class_name": class_name,
        "config": {"device": "cpu", "dtype": dtype}}))
    return root, plan
