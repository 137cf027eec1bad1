"""Event ids: 26-character ULIDs (48-bit milliseconds, 80 random bits) in Crockford's base 32.

They sort by creation time and never repeat within a process; one alphabet and one decoder
serve the log (`eventstore.events`) and the bus's ids derived from commands (`bus.codec`).
"""

from __future__ import annotations

import os
import threading
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_CHARS = frozenset(CROCKFORD)


class _EventIdClock:
    """Monotonic ULID-style ids: 48-bit ms time + 80-bit randomness, strictly increasing per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def next(self) -> str:
        with self._lock:
            ms = time.time_ns() // 1_000_000
            if ms <= self._last_ms:
                ms = self._last_ms
                rand = self._last_rand + 1
                if rand >= 1 << 80:
                    ms += 1
                    rand = int.from_bytes(os.urandom(10), "big") >> 1
            else:
                rand = int.from_bytes(os.urandom(10), "big") >> 1
            self._last_ms, self._last_rand = ms, rand
        value = (ms << 80) | rand
        return "".join(CROCKFORD[(value >> shift) & 31] for shift in range(125, -5, -5))


_clock = _EventIdClock()


def new_event_id() -> str:
    """A 26-character id that sorts by creation time and never repeats."""
    return _clock.next()


def is_ulid(value: str) -> bool:
    return len(value) == 26 and value[0] in "01234567" and _ULID_CHARS.issuperset(value)


def ulid_ms(ulid: str) -> int:
    """The first 10 characters of a ULID are its 48-bit millisecond timestamp."""
    ms = 0
    for ch in ulid[:10]:
        ms = ms * 32 + CROCKFORD.index(ch)
    return ms


def event_id_time(event_id: str) -> float:
    """The creation time (unix seconds) encoded in an event id."""
    return ulid_ms(event_id) / 1000.0
