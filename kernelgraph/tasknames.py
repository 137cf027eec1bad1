"""Shipped tasks by name: `kernelgraph verify rmsnorm kernels/rmsnorm.py` as well as by path.

A TASK argument is resolved in this order: a path that exists is used as it is (a user's
own `rmsnorm.py` in the working directory wins over the shipped one); otherwise the
argument, with or without a `.py` suffix (or as `tasks/<name>.py` from another directory),
names a file of the shipped suite in `tasks/`.
Anything else is an error that lists the shipped names closest to what was typed. This
module reads file names only: resolving never imports a task (nor JAX).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from kernelgraph.errors import KernelgraphError

__all__ = ["UnknownTask", "resolve_task", "shipped_dir", "shipped_tasks"]


class UnknownTask(KernelgraphError, ValueError):
    """A TASK argument that is neither an existing path nor a shipped task's name."""


def shipped_dir() -> Path:
    """The folder of the shipped task suite: the `tasks` package, installed beside this one
    (found by location, not by import, so a script's own `tasks.py` cannot shadow it)."""
    return Path(__file__).resolve().parent.parent / "tasks"


def shipped_tasks() -> dict[str, Path]:
    """Every shipped task, name -> file, sorted by name (a task's name is its file's stem)."""
    return {p.stem: p for p in sorted(shipped_dir().glob("*.py")) if not p.stem.startswith("_")}


def resolve_task(arg: str | Path) -> Path:
    """The task file `arg` means: an existing path, else a shipped task's name."""
    text = str(arg)
    path = Path(text).expanduser()
    if path.exists():
        return path
    shipped = shipped_tasks()
    name = path.name[:-3] if path.name.endswith(".py") else path.name
    if name in shipped and path.parent in (Path("."), Path("tasks")):
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    looks_like_path = path.parent != Path(".") or text.endswith(".py")
    what = "no such task file" if looks_like_path else "not a file, and no shipped task has that name"
    raise UnknownTask(f"{text}: {what}{hint} (`kernelgraph tasks` lists the shipped tasks)")
