"""How a run ends early, and how an exception is told in one line."""

from __future__ import annotations

import traceback

from autokernel.text import bounded_text, error_summary

NO_LAUNCH = ("kernel_fn launched no Triton kernel or CUDA launcher (a launch-free shortcut is "
             "refused even where it is exact, as for N == 1: the harness judges the kernel, not "
             "the shortcut)")
# The candidate process does not know which case it is called on: its reasons say WHERE, and the
# judge puts the case's description there (and the stage, when the candidate leaves it empty).
WHERE = "{where}"
# How much of a failure's full text (traceback, compiler message) a verdict carries in `detail`.
DETAIL_CHARS = 8000


class Verdict(Exception):
    """Ends the run with a non-PASS status."""

    def __init__(self, status: str, stage: str, reason: str, rule: str | None = None,
                 detail: str = "") -> None:
        super().__init__(reason)
        self.status, self.stage, self.reason, self.rule = status, stage, reason, rule
        self.detail = detail  # the full text behind `reason` (a traceback), bounded

    def to_dict(self) -> dict[str, str | None]:
        return {"status": self.status, "stage": self.stage, "reason": self.reason,
                "rule": self.rule, "detail": self.detail}


def gib(nbytes: float) -> str:
    """A byte count in the largest binary unit it reaches (12.00 GiB, 64.0 KiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            digits = 2 if unit == "GiB" else 1
            return f"{nbytes / scale:.{digits}f} {unit}"
    return f"{int(nbytes)} B"


def oom_summary(exc: BaseException) -> str:
    """torch's out-of-memory message, first sentence (it names what was asked and what is free)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def exception_summary(exc: BaseException, kernel_path: str) -> str:
    """'RuntimeError: message (kernel.py line 42)', the line being the candidate's last frame."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == kernel_path:
            line = lineno
    cause = exc.__cause__ or exc.__context__
    if line is None and cause is not None:
        for frame, lineno in traceback.walk_tb(cause.__traceback__):
            if frame.f_code.co_filename == kernel_path:
                line = lineno
    where = f" (kernel.py line {line})" if line is not None else ""
    return error_summary(exc, limit=400) + where


def exception_detail(exc: BaseException, kernel_path: str) -> str:
    """The exception's whole traceback and message (a Triton compile error's message carries the
    offending source lines), bounded to DETAIL_CHARS, the candidate's private copy named
    kernel.py."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return bounded_text(text.replace(kernel_path, "kernel.py"), DETAIL_CHARS)
