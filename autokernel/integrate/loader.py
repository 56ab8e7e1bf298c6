"""A finished run, read back for verify, report, export and `autokernel.load`.

Reads the workspace's files directly (run.json, plan.json, state.json, kernels/, results.tsv),
without git: using a run's kernels needs none of the run machinery. Every user error is a
`RunError` with a one-line message (the CLI turns it into exit 2):

- DIR is not a run (no run.json/state.json, or unreadable ones);
- the run has no finished target with a passing kernel;
- the run's model no longer loads (raised by `load_run_model`).

The manifest is what a finished kernel may be used for, as plain JSON-able data, so that the
exported module can carry it verbatim: tag, kernel type and role, source, the dtypes the harness
verified, the profiled parameters and call sites, tolerances and size limits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from torch import nn

    from autokernel.integrate.delivery import Delivered, Delivery
    from autokernel.integrate.patch import Patch, RoutedKernel
    from autokernel.loop.state import RunState, TargetState
    from autokernel.profiling.model_loader import LoadedModel
    from autokernel.profiling.plan import Plan, Target

MODULE_PREFIX = "autokernel_run"


class RunError(ValueError):
    """The directory cannot be used as a finished run; the message is one line for the user."""


@dataclass
class FinishedRun:
    root: Path
    info: dict[str, Any]  # run.json
    plan: Plan
    state: RunState
    include_slower: bool = False
    """Route every finished kernel: also those slower than eager PyTorch at their profiled shape,
    and those in-context selection left out."""

    @property
    def results_path(self) -> Path:
        from autokernel.loop.workspace import RESULTS_FILE

        return self.root / RESULTS_FILE

    @property
    def model_file(self) -> Path:
        return self.root / self.info["model_copy"]

    @property
    def class_name(self) -> str:
        return self.info.get("class_name", "Model")

    @property
    def dtype(self) -> str:
        return self.info.get("config", {}).get("dtype") or self.plan.dtype

    @property
    def device(self) -> str:
        return self.info.get("config", {}).get("device") or self.plan.device

    def plan_target(self, target: TargetState) -> Target:
        return self.plan.targets[target.index]

    def finished_targets(self) -> list[TargetState]:
        """Targets that are done and left a passing kernel under kernels/."""
        return [t for t in self.state.targets
                if t.status == "done" and t.kernel_file and (self.root / t.kernel_file).is_file()]

    def beats_pytorch(self, target: TargetState) -> bool:
        """Whether the target's best kernel was measured faster than eager PyTorch.

        A kernel that lost to PyTorch at the model's own shape would only slow the model down, so
        it is left out unless `include_slower`. Runs on the CPU interpreter have no meaningful
        timings, so every finished kernel counts there.
        """
        if self.include_slower or self.device == "cpu":
            return True
        best = target.best
        return best is None or best.speedup_vs_eager is None or best.speedup_vs_eager > 1.0

    def selection(self) -> Selection | None:
        """verify's in-context selection for these kernels, or None (no verify.json, one from
        before in-context selection, or one made for other kernels than the run's current)."""
        from autokernel.integrate.verify_result import read_result

        return selection_of(read_result(self.root), self.finished_targets())

    def require_any_finished(self) -> list[TargetState]:
        """Every finished target; a one-line RunError when there is none."""
        finished = self.finished_targets()
        if not finished:
            states = ", ".join(f"{t.tag} {t.status}" for t in self.state.targets) or "no targets"
            raise RunError(f"{self.root} has no finished target with a passing kernel yet "
                           f"({states}); continue it with `autokernel resume {self.root}`")
        return finished

    def require_finished(self) -> list[TargetState]:
        """The targets whose kernels to load: every finished one with `include_slower`; else those
        in-context selection kept in some mode, where verify has run on these kernels (maybe
        none); else (not verified yet) those measured faster than eager PyTorch alone, with a
        one-line RunError when there is none."""
        finished = self.require_any_finished()
        selection = None if self.include_slower else self.selection()
        if selection is not None:
            return [t for t in finished if t.tag in selection.tags]
        winners = [t for t in finished if self.beats_pytorch(t)]
        if not winners:
            raise RunError(f"none of the finished kernels of {self.root} beats eager PyTorch at "
                           f"its profiled shape ({', '.join(t.tag for t in finished)}); "
                           f"`autokernel verify {self.root}` measures them in the model, "
                           "--all-kernels splices them in anyway")
        return winners


@dataclass(frozen=True)
class Selection:
    """What `autokernel verify` measured in the model: the kernels routed in each mode (eager,
    compile) and the delivery it chose (mode and kernels)."""

    modes: dict[str, tuple[str, ...]]
    delivery: dict[str, Any] | None
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)  # (mode, tag) -> why out

    @property
    def tags(self) -> set[str]:
        found = {tag for tags in self.modes.values() for tag in tags}
        return found | set((self.delivery or {}).get("kernels", ()))

    @property
    def eager(self) -> tuple[str, ...]:
        return self.modes.get("eager", ())


def selection_of(verified: dict[str, Any] | None, finished: list[TargetState]
                 ) -> Selection | None:
    """The in-context selection saved in a verify.json, if it was made for `finished`'s kernels
    (the same tags at the same best experiments)."""
    if not verified or "selection" not in verified:
        return None
    made_for = {row["tag"]: row.get("best_experiment") for row in verified.get("kernels", [])}
    current = {t.tag: (t.best.experiment if t.best else None) for t in finished}
    if made_for != current:
        return None
    modes = {mode: tuple(tags) for mode, tags in verified["selection"].items()}
    reasons = {(row["mode"], row["kernel"]): row["reason"] for row in verified.get("ablation", [])
               if row.get("decision") == "out"}
    return Selection(modes, verified.get("delivery"), reasons)


def open_run(directory: str | Path, include_slower: bool = False) -> FinishedRun:
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import PLAN_FILE, RUN_FILE, STATE_FILE
    from autokernel.profiling.plan import Plan

    root = Path(directory).resolve()
    if not root.is_dir():
        raise RunError(f"{directory} is not a directory")
    missing = [n for n in (RUN_FILE, STATE_FILE, PLAN_FILE) if not (root / n).is_file()]
    if missing:
        raise RunError(f"{directory} is not an autokernel run (no {', '.join(missing)})")
    try:
        info = json.loads((root / RUN_FILE).read_text(encoding="utf-8"))
        plan = Plan.load(root / PLAN_FILE)
        state = RunState.load(root / STATE_FILE)
        info["model_copy"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunError(f"{directory} is not a readable autokernel run: "
                       f"{type(exc).__name__}: {exc}") from None
    return FinishedRun(root, info, plan, state, include_slower)


@contextmanager
def _importable_from(directory: Path | None) -> Iterator[None]:
    """Let the copy import the modules that sat next to the original file (appended, so the
    copy's own directory still wins)."""
    import sys

    entry = str(directory) if directory is not None and directory.is_dir() else None
    added = entry is not None and entry not in sys.path
    if added:
        sys.path.append(entry)  # type: ignore[arg-type]
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)  # type: ignore[arg-type]


def load_run_model(run: FinishedRun, device: str, check_forward: bool = True) -> LoadedModel:
    """The run's model copy through the shared loader: same class, dtype, seed and inputs.

    Each call builds a new model from a fresh import of the file, sharing nothing with an
    earlier one (a deep copy would: a lambda or closure in the model keeps calling the
    original's layers). The workspace holds a copy of the model file only; a file that imports
    its neighbours (examples/models/tiny_llama.py imports llama.py) finds them next to the
    original file. `check_forward=False` skips the loader's trial forward (for a second build of
    a model whose first build already ran one).
    """
    from autokernel.profiling.model_loader import ModelLoadError, load_model_file

    original = Path(run.info.get("model", ""))
    neighbours = original.resolve().parent if run.info.get("model") else None
    try:
        with _importable_from(neighbours):
            return load_model_file(run.model_file, class_name=run.class_name, dtype=run.dtype,
                                   device=device, check_forward=check_forward)
    except ModelLoadError as exc:
        raise RunError(f"the run's model no longer loads: {exc}") from None


# ---------------------------------------------------------------------------------------------
# The manifest


def _limits(kernel_type: str) -> dict[str, Any]:
    if kernel_type == "reduce":  # the sizes below which the profiler does not call a sum a target
        from autokernel.ops.reduce import REDUCE_MIN_ELEMENTS, REDUCE_MIN_ROW

        return {"min_elements": REDUCE_MIN_ELEMENTS, "min_row": REDUCE_MIN_ROW}
    return {}


def verified_dtypes(target: TargetState, run_dtype: str) -> list[str]:
    """The dtypes the harness checked the best kernel's correctness in: the run's own dtype
    unless the run used --check-all-dtypes. Calls in any other dtype stay with PyTorch."""
    verdict = target.best_result or {}
    return list(verdict.get("correctness_dtypes") or [run_dtype])


def verified_params(kernel_type: str, profiled: dict[str, Any]) -> dict[str, Any]:
    """The parameters the harness ran the kernel with: the profiled ones (the loop hands them to
    the harness), and the reference's defaults for the others (eps, causal, scale)."""
    import inspect

    from autokernel.ops import get_spec

    params = dict(profiled)
    for name, parameter in inspect.signature(get_spec(kernel_type).reference).parameters.items():
        if parameter.default is not inspect.Parameter.empty:
            params.setdefault(name, parameter.default)
    return params


def manifest_entry(run: FinishedRun, target: TargetState) -> dict[str, Any]:
    from autokernel.ops import get_integration, get_spec
    from autokernel.ops.spec import dtype_name

    spec = get_spec(target.kernel_type)
    plan_target = run.plan_target(target)
    sites: list[str] = []
    for site in plan_target.call_sites:
        if site.module not in sites:
            sites.append(site.module)
    best = target.best
    return {
        "tag": target.tag,
        "kernel_type": target.kernel_type,
        # What the kernel's calls are, for kernel types with roles: matmul's "linear" (routed as
        # nn.Linear), "batched" or "gemm" (routed as torch.matmul & co.); "" for the others.
        "role": plan_target.role,
        "file": target.kernel_file,
        "dtypes": verified_dtypes(target, plan_target.dtype),
        "params": verified_params(target.kernel_type, plan_target.params),
        "sites": sites,
        "tolerances": {dtype_name(d): [t.atol, t.rtol]
                       for d, t in spec.tolerances_for(plan_target.params).items()},
        "limits": _limits(target.kernel_type),
        "backward": get_integration(target.kernel_type).backward,
        "share": plan_target.share,
        "shape": list(plan_target.bench_shape),
        "dtype": plan_target.dtype,
        "best_experiment": best.experiment if best else None,
        "speedup_vs_eager": best.speedup_vs_eager if best else None,
        "speedup_vs_compile": best.speedup_vs_compile if best else None,
    }


def read_sources(run: FinishedRun, targets: list[TargetState]) -> dict[str, str]:
    return {t.tag: (run.root / str(t.kernel_file)).read_text(encoding="utf-8") for t in targets}


@dataclass
class LoadedKernels:
    """A run's finished kernels, registered and ready: `patch(model)` routes a model to them."""

    root: Path
    kernels: list[RoutedKernel]
    manifest: list[dict[str, Any]] = field(default_factory=list)
    device: str = "cuda"
    selection: Selection | None = None  # verify's in-context selection, when there is one

    def patch(self, model: nn.Module, under_compile: str = "inductor",
              left_out: tuple[str, ...] = (), only: Iterable[str] | None = None) -> Patch:
        """Route `model` to the kernels, in place: those in-context selection kept for eager
        mode when verify has measured them (`only` names others); under torch.compile they
        step aside for Inductor unless `under_compile="transparent"` (the triton_ops go into
        compiled graphs) or `"kernels"` (every kernel does); see `patch_model`."""
        from autokernel.integrate.patch import patch_model

        selection = self.selection if only is None else None
        if selection is not None:
            only = selection.eager
        chosen = self.kernels if only is None else [k for k in self.kernels
                                                     if k.tag in set(only)]
        patch = patch_model(model, chosen, under_compile, left_out)
        if selection is not None:  # say why verify's other kernels are not in eager mode
            for kernel in self.kernels:
                if kernel.tag not in selection.eager:
                    why = selection.reasons.get(("eager", kernel.tag), "not selected")
                    patch.report.left_out[kernel.tag] = (
                        f"verify's in-context selection left it out of eager mode ({why}); "
                        "optimize(model) uses the delivery verify chose")
        return patch

    def optimize(self, model: nn.Module, delivery: Delivery | None = None) -> Delivered:
        """The fastest model `autokernel verify` measured: `model` with the kernels it kept, in
        the delivery mode it chose (eager, a CUDA graph, torch.compile or reduce-overhead).
        Call the result like the model; `.delivery` says what it is, `.patch.report` what was
        routed. `delivery` overrides verify's choice."""
        from autokernel.integrate.delivery import Delivery, deliver

        if delivery is None:
            if self.selection is None or self.selection.delivery is None:
                raise RunError(f"{self.root}: no in-context selection for these kernels yet; "
                               f"run `autokernel verify {self.root}` first (or call patch)")
            delivery = Delivery.from_dict(self.selection.delivery)
        return deliver(model, self.kernels, delivery)

    def __repr__(self) -> str:
        tags = ", ".join(k.tag for k in self.kernels)
        return f"LoadedKernels({self.root}, [{tags}], device={self.device!r})"


def load_finished(run: FinishedRun, device: str | None = None,
                  compile_transparent: bool | None = None,
                  candidates: bool = False) -> LoadedKernels:
    """The run's kernels, registered: those `require_finished` names, or with `candidates`
    every finished one (what verify's in-context selection chooses from)."""
    import torch

    from autokernel.integrate.patch import KernelLoadError, build_kernels
    from autokernel.ops import get_integration, get_spec

    targets = run.require_any_finished() if candidates else run.require_finished()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    manifest = [manifest_entry(run, t) for t in targets]
    sources = read_sources(run, targets)
    filenames = {t.tag: str(run.root / str(t.kernel_file)) for t in targets}
    try:
        types = {t.kernel_type for t in targets}
        references = {t: get_spec(t).reference for t in types}
        integrations = {t: get_integration(t) for t in types}
        kernels = build_kernels(manifest, sources, references, integrations, device,
                                MODULE_PREFIX, filenames, compile_transparent)
    except KernelLoadError as exc:
        raise RunError(str(exc)) from None
    selection = None if candidates or run.include_slower else run.selection()
    return LoadedKernels(run.root, kernels, manifest, device, selection)


def load(
    directory: str | Path, device: str | None = None, all_kernels: bool = False,
    compile_transparent: bool | None = None,
) -> LoadedKernels:
    """The finished kernels of the run in `directory`; `.patch(model)` routes a model to them.

    `device`: "cuda" (default when a GPU is visible) or "cpu", which runs the kernels in the
    Triton interpreter (slow; for tests) and must be chosen before any Triton kernel is loaded.
    Once `autokernel verify` has measured the kernels in the model, only those its in-context
    selection kept are included, and `.patch(model)` routes its eager choice while
    `.optimize(model)` gives its chosen delivery; before that, only kernels measured faster than
    eager PyTorch alone. `all_kernels` includes (and `.patch` routes) every finished kernel.
    `compile_transparent`: None registers each kernel as a triton_op (torch.compile sees its
    Triton launches) where its host code traces, else as a custom_op; True/False force one.
    """
    return load_finished(open_run(directory, include_slower=all_kernels), device,
                         compile_transparent)
