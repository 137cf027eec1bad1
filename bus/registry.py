"""Agent name -> Service class. Later issues add agents by decorating a class with `@register`.

`load_agents()` imports the modules that define agents: the built-in ones listed here, the
composition root's list (`kernelgraph.runtime.AGENT_MODULES`), and any named in the
KG_AGENT_MODULES environment variable (comma-separated; for plug-ins and tests).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from kernelgraph.errors import KernelgraphError

if TYPE_CHECKING:
    from bus.service import Service

AGENT_MODULES_ENV = "KG_AGENT_MODULES"
BUILTIN_AGENT_MODULES: tuple[str, ...] = ("bus.echo",)
RECORDER = "recorder"
"""Not an agent but a service name `kernelgraph serve` accepts too; no agent may take it."""

S = TypeVar("S", bound="type[Service]")

_agents: dict[str, type[Service]] = {}


class UnknownAgent(KernelgraphError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def register(cls: S) -> S:
    """Class decorator: make a Service subclass available under its `agent` name."""
    name = cls.agent
    if name == RECORDER:
        raise ValueError(f"{cls.__qualname__}: the agent name {RECORDER!r} is reserved")
    existing = _agents.get(name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ValueError(
            f"agent {name!r} is registered twice: {existing.__module__}.{existing.__qualname__} "
            f"and {cls.__module__}.{cls.__qualname__}"
        )
    _agents[name] = cls
    return cls


def load_agents(modules: Iterable[str] = ()) -> dict[str, type[Service]]:
    """Import every agent module (built-in, given, and from the environment); return the registry."""
    extra = [m.strip() for m in os.environ.get(AGENT_MODULES_ENV, "").split(",") if m.strip()]
    for module in (*BUILTIN_AGENT_MODULES, *modules, *extra):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"agent module {module!r} cannot be imported: {exc}") from exc
    return dict(_agents)


def agents() -> dict[str, type[Service]]:
    return dict(sorted(_agents.items()))


def get(name: str) -> type[Service]:
    try:
        return _agents[name]
    except KeyError:
        known = ", ".join(sorted(_agents)) or "none"
        raise UnknownAgent(f"unknown agent {name!r}; registered agents: {known}") from None
