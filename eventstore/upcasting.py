"""Upcasters: functions that lift an old event body to the next schema version.

When an event's payload changes shape, bump `v` on its class and register one
upcaster per step, so a log written years ago still replays: the stored body is
never rewritten, it is lifted on the way out.

    @upcaster("TestsRun", from_version=1)
    def _rename_ok(body: dict) -> dict:
        body["passed"] = body.pop("ok")
        return body
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgraph.errors import KernelgraphError

Body = dict[str, Any]
Upcaster = Callable[[Body], Body]

_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


class UpcastError(KernelgraphError, ValueError):
    """An old event has no path to the current schema."""


def upcaster(type_name: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register `fn` to lift `type_name` bodies from `from_version` to `from_version + 1`."""

    def register(fn: Upcaster) -> Upcaster:
        key = (type_name, from_version)
        if key in _UPCASTERS and _UPCASTERS[key] is not fn:
            raise ValueError(f"an upcaster for {type_name} v{from_version} is already registered")
        _UPCASTERS[key] = fn
        return fn

    return register


def unregister(type_name: str, *, from_version: int) -> None:
    _UPCASTERS.pop((type_name, from_version), None)


def upcast(type_name: str, body: Body, *, to_version: int) -> Body:
    """Apply each step from the body's `v` up to `to_version`."""
    version = int(body.get("v", 1))
    if version > to_version:
        raise UpcastError(
            f"{type_name} event is schema v{version}, newer than this kernelgraph's v{to_version}; "
            "upgrade kernelgraph to read this log"
        )
    while version < to_version:
        step = _UPCASTERS.get((type_name, version))
        if step is None:
            raise UpcastError(f"no upcaster for {type_name} from v{version} to v{version + 1}")
        body = step(dict(body))
        version += 1
        body["v"] = version
    return body


@upcaster("RunRequested", from_version=1)
def _run_requested_v2(body: Body) -> Body:
    """v2 records the weak-sandbox opt-in; a v1 run never had it."""
    body.setdefault("weak_sandbox", False)
    return body
