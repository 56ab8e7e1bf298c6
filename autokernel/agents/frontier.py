"""The Claude agent's frontier: the passing structures of a target it may edit next.

A greedy chain edits only the current best, so a structure that is slower alone but opens a faster
next step is lost once it is reverted. The frontier keeps the `size` fastest passing structures of
the current target (the best, the formerly kept ones, and the near-misses: passing kernels reverted
because they were not faster than the best), one entry per structure (`structure_key`: the code
with tunable values blanked; the fastest measured configuration represents it). Before each
conversation it picks the parent, epsilon-greedily: with probability 1 - `explore` the current
best, otherwise another entry, the least often picked first (then the fastest). `size` 1 or
`explore` 0 is the greedy chain.

The keep rule stays global: the loop judges a near-miss's child against the current best like any
candidate, and only a kept experiment moves the branch. A proposal edited from another entry than
the best has a description starting with `[from exp N] `, so results.tsv shows its parent.

Nothing of it lives only in memory, so a resumed run rebuilds the same frontier:
- latencies and statuses come from the target's history (results.tsv, as `Attempt`s);
- sources: every draft the agent hands to the loop, and every passing tuner configuration, is
  written to the workspace's `frontier/NNNN.py` (git-ignored; reverted near-misses are never
  committed). A kept experiment missing there (a workspace older than the frontier) is read from
  its commit on the branch (subject `exp N ...`);
- how often each structure was picked: a `[from exp N]` description counts for N, any other LLM
  experiment for the best of its time;
- the draw for experiment E's slot S is seeded by (seed, E, S), so a resumed run draws as the
  uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path

from autokernel.agents.base import AgentContext, Attempt, ParentKernel
from autokernel.agents.claude_prompt import TUNER_PREFIX
from autokernel.agents.hybrid import structure_key
from autokernel.files import atomic_write_text
from autokernel.loop.workspace import FRONTIER_DIR
from autokernel.text import count_of

PASSING = ("keep", "revert", "baseline")  # statuses of measured, correct kernels
INCUMBENT = ("keep", "baseline")  # statuses that made a kernel the best
_PARENT_TAG = re.compile(r"^\[from exp (\d+)\] ")
NO_EXPERIMENT = -1  # a best the history does not show (a context built by hand): never on disk


def parent_tag(experiment: int) -> str:
    """The description prefix of a proposal edited from experiment `experiment`'s kernel."""
    return f"[from exp {experiment}] "


def tagged_parent(description: str) -> int | None:
    """The parent experiment a description names with `parent_tag`, or None."""
    match = _PARENT_TAG.match(description)
    return int(match.group(1)) if match else None


def frontier_key(source: str) -> str:
    """One key per structure; a file without a TUNABLE_SPACE is a structure of its own."""
    key = structure_key(source)
    if key is not None:
        return key
    return "source:" + hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclass
class FrontierEntry:
    key: str
    experiment: int  # the experiment that measured the representative configuration
    source: str
    latency_us: float | None  # None only for a best that was never measured
    picks: int = 0  # conversations that edited this structure


class Frontier:
    """The top `size` passing structures of the target; picks each conversation's parent."""

    def __init__(self, size: int = 4, explore: float = 0.25, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"the frontier keeps at least the best (size >= 1); got {size}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore is a probability (0 to 1); got {explore}")
        self.size = size
        self.explore = explore
        self.seed = seed
        self._workspace: Path | None = None
        self._sources: dict[int, str | None] = {}  # experiment -> source (None: unknown)
        self._keys: dict[int, str] = {}
        self._commits: dict[int, str] | None = None  # experiment -> commit, read once per sync
        self._entries: list[FrontierEntry] = []

    @property
    def greedy(self) -> bool:
        return self.size == 1 or self.explore == 0.0

    # -- sources ---------------------------------------------------------------------------

    def remember(self, experiment: int, source: str, workspace: str | None = None) -> None:
        """The source of experiment `experiment`, kept for a later sync (and a resume)."""
        self._sources[experiment] = source
        self._keys.pop(experiment, None)
        root = Path(workspace) if workspace else self._workspace
        if root is None or experiment < 0:
            return
        path = root / FRONTIER_DIR / f"{experiment:04d}.py"
        try:
            path.parent.mkdir(exist_ok=True)
            atomic_write_text(path, source, durable=False)
        except OSError:
            pass  # the frontier is an aid: a full disk must not end the night here

    def _source_of(self, attempt: Attempt) -> str | None:
        if attempt.experiment not in self._sources:
            self._sources[attempt.experiment] = self._stored_source(attempt)
        return self._sources[attempt.experiment]

    def _stored_source(self, attempt: Attempt) -> str | None:
        if self._workspace is None:
            return None
        path = self._workspace / FRONTIER_DIR / f"{attempt.experiment:04d}.py"
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            pass
        if attempt.status not in INCUMBENT:
            return None
        commit = self._kept_commits().get(attempt.experiment)
        if commit is None:
            return None
        try:
            from autokernel.loop.workspace import KERNEL_FILE, Workspace

            return Workspace(self._workspace).file_at(commit, KERNEL_FILE)
        except Exception:  # gitpython missing, a rewritten branch: the entry is simply absent
            return None

    def _kept_commits(self) -> dict[int, str]:
        if self._commits is None:
            self._commits = {}
            try:
                from autokernel.loop.workspace import Workspace

                for sha, subject in Workspace(self._workspace or Path(".")).branch_commits():
                    match = re.match(r"exp (\d+) ", subject)
                    if match:
                        self._commits[int(match.group(1))] = sha
            except Exception:
                pass
        return self._commits

    def _key_of(self, experiment: int, source: str) -> str:
        if experiment not in self._keys:
            self._keys[experiment] = frontier_key(source)
        return self._keys[experiment]

    # -- the entries -------------------------------------------------------------------------

    def sync(self, context: AgentContext) -> list[FrontierEntry]:
        """Rebuild the entries from the target's history and best; return them, best first."""
        self._workspace = Path(context.workspace) if context.workspace else None
        self._commits = None
        history = context.history
        incumbent = next((a for a in reversed(history) if a.status in INCUMBENT), None)
        best_experiment = incumbent.experiment if incumbent else NO_EXPERIMENT
        if self._sources.get(best_experiment) != context.best_source:
            self.remember(best_experiment, context.best_source)
        best_latency = incumbent.latency_us if incumbent else None
        if best_latency is None and context.best is not None:
            best_latency = context.best.latency_us

        fastest: dict[str, FrontierEntry] = {}
        for attempt in history:
            if attempt.status not in PASSING or attempt.latency_us is None:
                continue
            source = self._source_of(attempt)
            if source is None:
                continue
            key = self._key_of(attempt.experiment, source)
            held = fastest.get(key)
            if held is None or attempt.latency_us < (held.latency_us or float("inf")):
                fastest[key] = FrontierEntry(key, attempt.experiment, source, attempt.latency_us)
        best_key = self._key_of(best_experiment, context.best_source)
        best = FrontierEntry(best_key, best_experiment, context.best_source, best_latency)
        others = sorted((e for k, e in fastest.items() if k != best_key),
                        key=lambda e: (e.latency_us, e.experiment))
        self._entries = [best] + others[: self.size - 1]
        self._count_picks(history)
        return list(self._entries)

    def _count_picks(self, history: list[Attempt]) -> None:
        by_key = {entry.key: entry for entry in self._entries}
        best_then: int | None = None
        for attempt in history:
            parent = tagged_parent(attempt.description)
            llm = attempt.status != "baseline" and not attempt.description.startswith(TUNER_PREFIX)
            if parent is None and llm:
                parent = best_then
            source = self._sources.get(parent) if parent is not None else None
            if source is not None:
                entry = by_key.get(self._key_of(parent, source))  # type: ignore[arg-type]
                if entry is not None:
                    entry.picks += 1
            if attempt.status in INCUMBENT:
                best_then = attempt.experiment

    @property
    def entries(self) -> list[FrontierEntry]:
        """The entries of the last sync, the best first, then the others fastest first."""
        return list(self._entries)

    # -- the pick ------------------------------------------------------------------------------

    def pick(self, experiment: int, slot: int = 0) -> ParentKernel:
        """The parent of experiment `experiment`'s conversation number `slot` (after `sync`)."""
        if not self._entries:
            raise RuntimeError("Frontier.pick before Frontier.sync")
        best, others = self._entries[0], self._entries[1:]
        chosen, why = best, "the current best"
        if others and not self.greedy:
            draw = random.Random(f"{self.seed}/{experiment}/{slot}").random()
            if draw < self.explore:
                chosen = min(others, key=lambda e: (e.picks, e.latency_us, e.experiment))
                why = (f"to explore (probability {self.explore:g}): the least edited of the "
                       f"{len(others)} other passing structures of this target, edited "
                       f"{count_of(chosen.picks, 'time')} before")
        chosen.picks += 1
        return ParentKernel(experiment=chosen.experiment, source=chosen.source,
                            latency_us=chosen.latency_us, why=why, is_best=chosen is best,
                            best_latency_us=best.latency_us)
