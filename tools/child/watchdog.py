"""Phase time limits inside the child: ``build()``, each shape's trace and each case get
their own deadline, so a candidate that hangs costs seconds, not the whole wall limit.

The parent sets the limits (:mod:`tools.verification.deadlines`). A watchdog thread,
armed before each phase, writes a result that names the phase and its limit and ends the
process when a deadline passes. The candidate runs in this process and could disarm it;
then the sandbox's overall wall limit still ends the run, so only time is lost. Everything
the watchdog uses is bound when this module is imported, before any candidate code runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tools.sandbox import wire

_POLL_S = 0.1
_exit = os._exit
_replace = os.replace
_monotonic = time.monotonic
_sleep = time.sleep
_encode = wire.encode


class Watchdog:
    """One deadline at a time; :meth:`phase` arms it around a block of work."""

    def __init__(self, result_path: Path) -> None:
        self._path = Path(result_path)
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._message = ""
        self._started = _monotonic()
        threading.Thread(target=self._watch, name="kg-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def phase(self, seconds: float, message: str) -> Iterator[None]:
        """Run the block under a deadline of ``seconds`` (none when <= 0); ``message`` says
        what was not finished, for the verdict."""
        with self._lock:
            previous = (self._deadline, self._message)
            if seconds > 0:
                self._deadline, self._message = _monotonic() + seconds, message
        try:
            yield
        finally:
            with self._lock:
                self._deadline, self._message = previous

    def _watch(self) -> None:
        while True:
            _sleep(_POLL_S)
            with self._lock:
                deadline, message = self._deadline, self._message
            if deadline is not None and _monotonic() > deadline:
                self._expire(message)

    def _expire(self, message: str) -> None:
        response = wire.EvalResponse(limit_hit=message,
                                     seconds=_monotonic() - self._started)
        partial = self._path.with_name(self._path.name + ".partial")
        try:
            partial.write_bytes(_encode(response))
            _replace(partial, self._path)
        finally:
            _exit(0)


_current: Watchdog | None = None


def install(result_path: Path) -> Watchdog:
    global _current
    _current = Watchdog(result_path)
    return _current


def phase(seconds: float, message: str) -> contextlib.AbstractContextManager[None]:
    """The installed watchdog's phase, or no limit where none is installed."""
    if _current is None:
        return contextlib.nullcontext()
    return _current.phase(seconds, message)
