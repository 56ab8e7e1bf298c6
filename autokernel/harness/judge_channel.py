"""The judge's end of one candidate process's socket: one request, one reply, nothing else.

The candidate process may be anything (a kernel that escaped every scan runs arbitrary code in
it), so the reply to each request is checked before any of it is used:

- it must carry the request's sequence number, and nothing may follow it on the socket (a frame
  written ahead, or by a thread of the candidate's, desynchronises the channel: a CRASH);
- it is exactly one of `ok` (with exactly the keys that request's reply has), `violation` (a
  detector fired over there: FAIL, REJECTED or CRASH, never PASS, SKIPPED or TIMEOUT), `oom` or
  `harness_error`;
- every piece of text in it is escaped and capped (`untrusted.candidate_text`) before it can
  reach a reason, a note or a terminal.

Anything else is a CRASH verdict naming what arrived. Only the judge writes the verdict.
"""

from __future__ import annotations

import os
import re
import signal
import socket
from typing import Any

import torch

from autokernel.harness import channel
from autokernel.harness.untrusted import DETAIL_CHARS, REASON_CHARS, candidate_text
from autokernel.harness.verdict import WHERE, Verdict

# The keys of each request's `ok` reply (several sets: any one of them).
REPLY_KEYS: dict[str, tuple[frozenset[str], ...]] = {
    "setup": (frozenset({"sandbox"}),),
    "inputs": (frozenset(),), "refill": (frozenset(),), "release": (frozenset(),),
    "call": (frozenset({"out", "storage"}), frozenset({"out", "type", "subclass"})),
    "kept": (frozenset({"outs"}),),
    "aot_requests": (frozenset({"requests"}),),
    "profile": (frozenset({"digest", "peak_vram_mb", "out"}),),
    "synced": (frozenset({"wall_us", "tail_us"}),),
    "slots": (frozenset(),), "stage": (frozenset(),), "end_slots": (frozenset(),),
    "batch": (frozenset({"device_us", "host_us", "ahead"}),),
    "batch_outputs": (frozenset({"outputs"}),),
}
# What a candidate process may report of itself: worse than PASS, never anything else.
VIOLATION_STATUSES = frozenset({"FAIL", "REJECTED", "CRASH"})
_RULE = re.compile(r"^[a-z][a-z-]{0,39}$")


class CandidateGone(Exception):
    """The candidate process closed the channel (it died, or exited on its own)."""


class Endpoint:
    """One candidate process (the candidate's, or the incumbent's) as the judge sees it."""

    def __init__(self, role: str, sock: socket.socket, pid: int, device: torch.device) -> None:
        self.role, self.sock, self.pid, self.device = role, sock, pid, device
        self.seq = 0
        self.awaiting: str | None = None
        self.paused = False

    def send(self, op: str, **fields: Any) -> None:
        """Send a request whose reply `receive` will read later (the judge works meanwhile)."""
        if self.awaiting is not None:
            raise RuntimeError(f"{self.role}: a reply to {self.awaiting} is still awaited")
        self.resume()
        self.seq += 1
        try:
            channel.send(self.sock, {"op": op, "seq": self.seq, **fields}, cuda_ipc=False)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise CandidateGone(str(exc)) from None
        self.awaiting = op

    def receive(self, stage: str, where: str = "") -> dict[str, Any]:
        """The awaited reply's data; a violation over there ends the run as a verdict, with the
        judge's stage and case description filled in."""
        op, self.awaiting = self.awaiting, None
        assert op is not None
        try:
            reply = channel.receive(self.sock, self.device, channel.JUDGE_ACCEPTS)
        except (channel.ChannelClosed, ConnectionResetError) as exc:
            raise CandidateGone(str(exc)) from None
        if channel.pending(self.sock):
            raise channel.BadMessage(f"a frame nobody asked for followed the reply to {op}")
        if reply.get("seq") != self.seq:
            raise channel.BadMessage(f"a reply out of order (to {op}: sequence "
                                     f"{candidate_text(reply.get('seq'), 20)}, expected "
                                     f"{self.seq})")
        kinds = set(reply) - {"seq"}
        if len(kinds) != 1:
            raise channel.BadMessage(f"a reply to {op} with {sorted(kinds)[:5]} "
                                     "(exactly one of ok, violation, oom, harness_error)")
        kind = kinds.pop()
        if kind == "ok":
            return _expected(op, reply["ok"])
        if kind == "violation":
            raise _violation(reply["violation"], stage, where)
        if kind == "oom":
            raise Verdict("CRASH", stage, f"out of memory during {stage}"
                          f"{' at ' + where if where else ''}: {candidate_text(reply['oom'], 300)}")
        if kind == "harness_error":
            error = candidate_text(reply["harness_error"], DETAIL_CHARS)
            raise Verdict("CRASH", "harness", "internal harness error in the candidate process: "
                          + error[-REASON_CHARS:], detail=error)
        raise channel.BadMessage(f"a reply to {op} of kind {candidate_text(kind, 40)!r}")

    def ask(self, op: str, stage: str, context: str = "", **fields: Any) -> dict[str, Any]:
        """`send` then `receive`; `context` is the case a violation's reason is about."""
        self.send(op, **fields)
        return self.receive(stage, context)

    def close(self) -> None:
        try:
            channel.send(self.sock, {"op": "exit"}, cuda_ipc=False)
        except OSError:
            pass
        self.sock.close()

    def pause(self) -> None:
        """Stop the process while another contestant is timed (it can queue no work then)."""
        if self.paused or not self.pid:
            return
        try:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True
        except ProcessLookupError:
            pass

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _expected(op: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or frozenset(data) not in REPLY_KEYS[op]:
        keys = sorted(data)[:6] if isinstance(data, dict) else type(data).__name__
        raise channel.BadMessage(f"a reply to {op} with {candidate_text(keys, 200)}, expected "
                                 f"{' or '.join(str(sorted(k)) for k in REPLY_KEYS[op])}")
    return data


def _violation(v: Any, stage: str, where: str) -> Verdict:
    if not isinstance(v, dict) or v.get("status") not in VIOLATION_STATUSES:
        status = v.get("status") if isinstance(v, dict) else v
        raise channel.BadMessage(f"a verdict of {candidate_text(status, 40)!r} from the "
                                 "candidate process (only the judge decides a verdict; it may "
                                 "report FAIL, REJECTED or CRASH only)")
    rule = v.get("rule")
    rule = rule if isinstance(rule, str) and _RULE.match(rule) else None
    reason = candidate_text(v.get("reason", ""), REASON_CHARS).replace(WHERE, where)
    detail = candidate_text(v.get("detail") or "", DETAIL_CHARS).replace(WHERE, where)
    their_stage = v.get("stage")
    return Verdict(str(v["status"]), their_stage if isinstance(their_stage, str) and
                   their_stage in _STAGES else stage, reason, rule, detail)


_STAGES = frozenset({"import", "smoke", "shape_sweep", "stability", "determinism", "edge_sizes",
                     "timing", "harness"})
