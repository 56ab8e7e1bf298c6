"""A routed call replayed: verify's host cost of the routing per call (`recording_calls`).

While recording, the kernel calls of `route_helpers` (`call_kernel`, `kernel_caller`'s) note the
arguments each route gave its kernel, and the routes' entries (patch.py) note how to replay the
call through the route. Like routing.py it imports only torch: `autokernel export` inlines it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from autokernel.integrate.custom_ops import _fitted, _kernel_fn_arity
from autokernel.integrate.routing import RoutedKernel


class CallRecorder:
    """While on (`recording_calls`), the first routed call of each kernel (by tag) that a route
    can replay alone (a module's forward, a torch call), twice over: `routed[tag]` replays it
    through its route (the route's entry, its plan, the kernel's call), `bare[tag]` calls the
    kernel file's kernel_fn alone on the arguments the route gave it (each of them, for a route
    that calls it more than once: a rotary module's q and k). Timing both gives what the
    routing adds to the kernel's own host time per call."""

    def __init__(self) -> None:
        self.routed: dict[str, Callable[[], Any]] = {}
        self.bare: dict[str, Callable[[], Any]] = {}
        self._launched: dict[str, list[Callable[[], Any]]] = {}  # since the tag's last route

    def begin(self, tag: str) -> None:
        """A route's call starts: the kernel calls recorded from now on are its own."""
        self._launched.pop(tag, None)

    def record_bare(self, kernel: RoutedKernel, args: tuple[Any, ...]) -> None:
        kernel_fn = kernel.op.kernel_fn
        if kernel.tag in self.routed or kernel_fn is None:
            return
        fitted = _fitted(args, _kernel_fn_arity(kernel_fn))
        self._launched.setdefault(kernel.tag, []).append(lambda: kernel_fn(*fitted))

    def record_routed(self, tag: str, replay: Callable[[], Any]) -> None:
        """The route's call that just returned (its kernel calls were recorded meanwhile)."""
        launched = self._launched.pop(tag, [])
        if tag in self.routed or not launched:
            return
        self.routed[tag] = replay
        self.bare[tag] = launched[0] if len(launched) == 1 else \
            (lambda: [launch() for launch in launched])


_RECORDER: list[CallRecorder | None] = [None]


@contextlib.contextmanager
def recording_calls() -> Iterator[CallRecorder]:
    """Record the routed calls made meanwhile (`CallRecorder`); eager calls only (a compiled
    graph runs no route)."""
    recorder = CallRecorder()
    _RECORDER[0] = recorder
    try:
        yield recorder
    finally:
        _RECORDER[0] = None


def record_routed(tag: str, replay: Callable[[], Any]) -> None:
    """A route's entry, after a call it sent to the kernel: its replay, while recording."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_routed(tag, replay)
