"""A Ctrl-C between profiling and the loop's first experiment (where the loop's own Ctrl-C
handling has not begun) ends the run with a line and exit status 130, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autokernel.pipeline import run as run_module
from autokernel.pipeline.options import EXIT_INTERRUPTED, PipelineError, RunOptions

FIXTURES = Path(__file__).parent / "fixtures"


def options(tmp_path: Path) -> RunOptions:
    return RunOptions(model_file=FIXTURES / "models" / "two_cheap_targets.py",
                      plan_file=FIXTURES / "plans" / "two_cheap_targets.json", device="cpu",
                      agent="tuner", out=tmp_path / "run", yes=True)


def interrupted(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


def test_a_ctrl_c_while_the_workspace_is_made_is_said(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "create_workspace", interrupted)
    with pytest.raises(PipelineError, match="interrupted before the first experiment") as caught:
        run_module.run_pipeline(options(tmp_path))
    assert caught.value.code == EXIT_INTERRUPTED


def test_a_ctrl_c_before_the_loop_runs_names_the_resume(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import autokernel.loop.runner as runner_module

    monkeypatch.setattr(runner_module, "Runner", interrupted)
    with pytest.raises(PipelineError, match="autokernel resume .*run` continues") as caught:
        run_module.run_pipeline(options(tmp_path))
    assert caught.value.code == EXIT_INTERRUPTED
    assert (tmp_path / "run" / "state.json").is_file()  # the workspace it names is there
