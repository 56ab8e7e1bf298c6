"""A run's workspace: its own git repository, never the user's.

Layout of DIR (tracked unless marked ignored):

    .gitignore        results.tsv, state.json, .cache/ are ignored: a revert must not touch them
    run.json          how the run was started (model, device, dtype, agent, rules, versions)
    plan.json         the profiler's plan
    program.md        the playbook for agents
    reference.py      the oracles, read-only (mode 444); the harness uses its own trusted copy
    model/<file>      a copy of the model file
    kernel.py         the kernel under optimization; at rest always equal to HEAD's
    kernels/NN_type.py  the best kernel of each finished target
    results.tsv       (ignored) one row per experiment, append-only
    verdicts/NNNN.json  (ignored) each experiment's whole harness verdict (stages, phase seconds)
    attempts/NNNN/    (ignored) a failed experiment's kernel.py and its full error, for agents
    lessons/<tag>.md  (ignored) the target's lessons.md: what was tried on it and what it taught
    frontier/NNNN.py  (ignored) the Claude agent's drafts and passing sweep configurations, so its
                      frontier of near-misses (reverted, never committed) survives a resume
    state.json        (ignored) run state and experiment journal
    .cache/           (ignored) harness caches, the run lock

Every git command runs with this repository's own identity and without hooks or signing, so a
user's global git configuration cannot break or slow a commit. `git` (gitpython) is imported
inside functions: `autokernel --help` stays fast and machines without gitpython can still import
this module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.files import atomic_write_text

if TYPE_CHECKING:
    import git

RUN_FILE = "run.json"
PLAN_FILE = "plan.json"
STATE_FILE = "state.json"
RESULTS_FILE = "results.tsv"
KERNEL_FILE = "kernel.py"
PROGRAM_FILE = "program.md"
REFERENCE_FILE = "reference.py"
KERNELS_DIR = "kernels"
MODEL_DIR = "model"
CACHE_DIR = ".cache"
VERDICTS_DIR = "verdicts"
ATTEMPTS_DIR = "attempts"
LESSONS_DIR = "lessons"
FRONTIER_DIR = "frontier"
BRANCH_PREFIX = "autokernel/"
AUTHOR_NAME = "autokernel"
AUTHOR_EMAIL = "autokernel@localhost"
# Also ignored: what `autokernel report`/`verify` write after a run, so that a later `resume`
# (whose reverts run `git clean`) never deletes them.
IGNORED = (RESULTS_FILE, STATE_FILE, f"{CACHE_DIR}/", "__pycache__/", "*.tmp", "run.log",
           "report.md", "report/", "progress.png", "verify.json", f"{VERDICTS_DIR}/",
           f"{ATTEMPTS_DIR}/", f"{LESSONS_DIR}/", f"{FRONTIER_DIR}/")


class WorkspaceError(RuntimeError):
    """The directory cannot be used as (or is not) a run workspace."""


def run_tag_for(model_path: str | Path, timestamp: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model_path).stem).strip("-.") or "model"
    return f"{stem}-{timestamp}"


def _enclosing_repo(path: Path) -> git.Repo | None:
    import git

    probe = path
    while not probe.exists():
        probe = probe.parent
    try:
        return git.Repo(probe, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def _is_run_root(path: Path) -> bool:
    return (path / RUN_FILE).is_file() and (path / ".git").exists()


def check_new_workspace_dir(root: Path) -> None:
    """Refuse a DIR that exists with content, or that sits inside someone's git work tree.

    Nested inside another git work tree, our repository would show up there as an untracked
    embedded repository; we accept that only where that tree ignores the path (as this project's
    own .gitignore does for autokernel_runs/). A run inside another run is always refused: the
    outer run's `git clean` would fight with it.
    """
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise WorkspaceError(f"{root} already exists and is not empty; `run` needs a new DIR "
                             "(use `autokernel resume DIR` to continue a run)")
    outer = _enclosing_repo(root)
    if outer is None or outer.working_tree_dir is None:
        return
    top = Path(outer.working_tree_dir).resolve()
    if _is_run_root(top):
        raise WorkspaceError(f"{root} is inside the autokernel run {top}; choose a DIR outside it")
    relative = root.resolve().relative_to(top).as_posix()
    import git

    try:
        outer.git.check_ignore("-q", relative + "/")
    except git.GitCommandError:
        raise WorkspaceError(
            f"{root} is inside the git work tree {top}, which does not ignore it; pass --out "
            f"outside it, or add its folder to {top / '.gitignore'}"
        ) from None


class Workspace:
    """Paths of a run directory and the few git operations the loop needs."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._repo: git.Repo | None = None

    # -- paths ---------------------------------------------------------------------------------
    @property
    def kernel_path(self) -> Path:
        return self.root / KERNEL_FILE

    @property
    def results_path(self) -> Path:
        return self.root / RESULTS_FILE

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    @property
    def plan_path(self) -> Path:
        return self.root / PLAN_FILE

    @property
    def run_path(self) -> Path:
        return self.root / RUN_FILE

    @property
    def cache_dir(self) -> Path:
        return self.root / CACHE_DIR

    @property
    def kernels_dir(self) -> Path:
        return self.root / KERNELS_DIR

    @property
    def reference_path(self) -> Path:
        return self.root / REFERENCE_FILE

    @property
    def program_path(self) -> Path:
        return self.root / PROGRAM_FILE

    def attempt_dir(self, experiment: int) -> Path:
        return self.root / ATTEMPTS_DIR / f"{experiment:04d}"

    def lessons_path(self, tag: str) -> Path:
        return self.root / LESSONS_DIR / f"{tag}.md"

    def read_run(self) -> dict[str, Any]:
        return json.loads(self.run_path.read_text(encoding="utf-8"))

    # -- git -----------------------------------------------------------------------------------
    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            import git

            try:
                repo = git.Repo(self.root)
            except (git.InvalidGitRepositoryError, git.NoSuchPathError):
                raise WorkspaceError(f"{self.root} is not a git repository") from None
            # Never act on a repository found above DIR: ours has its .git directly in DIR.
            if repo.working_tree_dir is None or Path(repo.working_tree_dir).resolve() != self.root:
                raise WorkspaceError(f"{self.root} is not the top of its own git repository")
            self._repo = repo
        return self._repo

    def _git(self, *args: str, strip: bool = True) -> str:
        # In its own session: a Ctrl-C in the terminal (the loop's "stop after this experiment")
        # must not kill a git command halfway through a commit or a reset.
        return self.repo.git.execute(
            ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
            strip_newline_in_stdout=strip,
            start_new_session=os.name == "posix",
        )

    @classmethod
    def create(
        cls,
        root: str | Path,
        *,
        run_tag: str,
        run_info: dict[str, Any],
        plan_json: str,
        model_path: str | Path,
        program_md: str,
        reference_source: str,
    ) -> Workspace:
        """Make DIR, its repository on branch autokernel/<run_tag>, and the first commit."""
        import git

        root = Path(root)
        check_new_workspace_dir(root)
        root.mkdir(parents=True, exist_ok=True)
        ws = cls(root)
        repo = git.Repo.init(ws.root)
        with repo.config_writer() as config:  # repo-local: the user's identity is not ours
            config.set_value("user", "name", AUTHOR_NAME)
            config.set_value("user", "email", AUTHOR_EMAIL)
            config.set_value("commit", "gpgsign", "false")
            config.set_value("core", "hooksPath", "/dev/null")
            config.set_value("gc", "auto", "0")  # no surprise repacks mid-run
        repo.git.symbolic_ref("HEAD", f"refs/heads/{BRANCH_PREFIX}{run_tag}")
        ws._repo = repo

        (ws.root / ".gitignore").write_text("".join(f"{p}\n" for p in IGNORED))
        ws.run_path.write_text(json.dumps(run_info, indent=2) + "\n")
        ws.plan_path.write_text(plan_json)
        ws.program_path.write_text(program_md)
        ws.reference_path.write_text(reference_source)
        ws.protect_reference()
        model_copy = ws.root / MODEL_DIR / Path(model_path).name
        model_copy.parent.mkdir()
        shutil.copy2(model_path, model_copy)
        ws.kernels_dir.mkdir()
        ws.cache_dir.mkdir()
        ws._git("add", "--all")
        ws._git("commit", "--quiet", "-m", f"autokernel run {run_tag}: workspace")
        return ws

    @classmethod
    def open(cls, root: str | Path) -> Workspace:
        """Open an existing run directory, refusing anything that is not one of ours."""
        ws = cls(root)
        if not ws.root.is_dir():
            raise WorkspaceError(f"{ws.root} is a file, not a run's workspace directory"
                                 if ws.root.exists() else f"{ws.root} does not exist")
        if not ws.run_path.is_file() or not ws.state_path.is_file():
            raise WorkspaceError(f"{ws.root} is not an autokernel run (no {RUN_FILE}/{STATE_FILE})")
        branch = ws.branch()
        if not branch.startswith(BRANCH_PREFIX):
            raise WorkspaceError(f"{ws.root} is on branch {branch!r}, not an autokernel/ branch")
        ws._ignore_new_paths()
        return ws

    def _ignore_new_paths(self) -> None:
        """A workspace made by an older version ignores fewer paths: ignore the rest through
        .git/info/exclude (the tracked .gitignore stays as committed), so a revert's `git clean`
        never deletes them."""
        listed = (self.root / ".gitignore").read_text().split() \
            if (self.root / ".gitignore").is_file() else []
        exclude = self.root / ".git" / "info" / "exclude"
        excluded = exclude.read_text().split() if exclude.is_file() else []
        missing = [p for p in IGNORED if p not in listed and p not in excluded]
        if missing:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a", encoding="utf-8") as handle:
                handle.write("".join(f"{p}\n" for p in missing))

    def write_verdict(self, experiment: int, verdict: dict[str, Any]) -> None:
        """Keep an experiment's whole harness verdict beside results.tsv (one file each)."""
        folder = self.root / VERDICTS_DIR
        folder.mkdir(exist_ok=True)
        (folder / f"{experiment:04d}.json").write_text(json.dumps(verdict, indent=1) + "\n")

    def branch(self) -> str:
        return self._git("symbolic-ref", "--short", "HEAD")

    def head(self) -> str:
        return self._git("rev-parse", "HEAD")

    def head_message(self) -> str:
        return self._git("log", "-1", "--format=%s")

    def parent_of(self, commit: str) -> str | None:
        out = self._git("rev-list", "--parents", "-n", "1", commit).split()
        return out[1] if len(out) > 1 else None

    def commit_paths(self, message: str, paths: list[str]) -> str:
        """Commit the named paths (relative to DIR) and return the new commit's hash."""
        self._git("add", "--", *paths)
        self._git("commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)
        return self.head()

    def reset_to(self, commit: str) -> None:
        """Make the tree exactly `commit`: tracked files reset, untracked ones removed.

        `clean -fd` without -x: ignored files (results.tsv, state.json, caches) survive.
        """
        self.remove_stale_lock()
        self._git("reset", "--quiet", "--hard", commit)
        self._git("clean", "--quiet", "-fd")
        self.protect_reference()

    def protect_reference(self) -> None:
        """reference.py stays read-only, also after git rewrote it (git keeps no 444 mode)."""
        if self.reference_path.exists():
            self.reference_path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)

    def is_on_branch(self, commit: str) -> bool:
        """Whether `commit` is HEAD or one of its ancestors."""
        import git

        try:
            self._git("merge-base", "--is-ancestor", commit, "HEAD")
        except git.GitCommandError:
            return False
        return True

    def file_at(self, commit: str, path: str) -> str:
        return self._git("show", f"{commit}:{path}", strip=False)

    def branch_commits(self) -> list[tuple[str, str]]:
        """(hash, subject) of every commit on the branch, oldest first."""
        out = self._git("log", "--reverse", "--format=%H %s")
        pairs = (line.split(" ", 1) for line in out.splitlines() if line)
        return [(sha, subject) for sha, subject in pairs]

    def remove_stale_lock(self) -> None:
        """Drop an index.lock left by a git process that was killed (only we use this repo)."""
        lock = self.root / ".git" / "index.lock"
        if lock.exists():
            lock.unlink()

    def write_kernel(self, source: str) -> None:
        # A plain write (no fsync): the journal holds the source, so a torn kernel.py is rewritten
        # on resume, and the harness reads the file right after this.
        atomic_write_text(self.kernel_path, source, durable=False)

    def read_kernel(self) -> str:
        return self.kernel_path.read_text(encoding="utf-8")


class RunLock:
    """An exclusive lock on a workspace for the life of this process (released by the OS on exit,
    also on kill -9), so two processes never drive the same run."""

    def __init__(self, workspace: Workspace) -> None:
        self.path = workspace.cache_dir / "run.lock"
        self._handle: Any = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks, run unguarded
            self._handle = handle
            return
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise WorkspaceError(
                f"another autokernel process is running on {self.path.parents[1]}"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
