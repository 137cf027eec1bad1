"""A sandbox's folder, held for its launcher's life, and the sweeping of those whose launcher died.

A launcher removes its box (the child's folder: the request with the task's inputs, hundreds
of MB at a large tuning point) and its control group when the child ends. A launcher that is
itself killed (SIGKILL, the OOM killer, a test's timeout) cannot, and over a long deployment
its leftovers fill the temporary folder and the cgroup tree. So:

1. A launcher holds an exclusive `flock` on its box from creating it to removing it. The
   kernel drops the lock when the holder dies, however it dies. Only a group whose box is
   already gone is judged by its owner's pid (not running: abandoned).
2. The first box a process makes sweeps once (:func:`sweep_once`): every group named for
   a box nobody holds has its members killed and is removed, then every such box. A box
   younger than `MIN_AGE_S` is left alone, so one made a moment ago, not yet locked, is safe.

Only what this user may remove is removed; anything else is left, and nothing here raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tools.sandbox import cgroups

PREFIX = "kg-sandbox-held-"
"""Only boxes made under this lock protocol are ever swept: a launcher of an older version
on the same machine holds no lock, and its live box must not look abandoned."""
MIN_AGE_S = 60.0

_swept = False
_sweep_lock = threading.Lock()


@dataclass
class Box:
    """A fresh 0700 folder and the open descriptor whose lock says its launcher is alive."""

    path: Path
    _fd: int

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def make_box() -> Box:
    """A new box, locked; the first one a process makes first sweeps what launchers killed
    before they could clean up left behind (:func:`sweep_once`)."""
    sweep_once()
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by children (PEP 446)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return Box(path, fd)


def abandoned(path: Path, *, min_age_s: float = MIN_AGE_S) -> bool:
    """True when `path` is a box older than `min_age_s` that no live launcher holds."""
    try:
        info = path.lstat()
        if not path.is_dir() or path.is_symlink() or time.time() - info.st_mtime < min_age_s:
            return False
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its launcher is alive
    finally:
        os.close(fd)
    return True


def sweep(folder: Path | None = None, *, min_age_s: float = MIN_AGE_S) -> list[str]:
    """Remove abandoned boxes in `folder` (the temporary folder) and their groups; returns
    what was removed."""
    folder = Path(folder or tempfile.gettempdir())
    try:
        boxes = {p.name: p for p in folder.iterdir() if p.name.startswith(PREFIX)}
    except OSError:
        return []
    dead = {name for name, path in boxes.items() if abandoned(path, min_age_s=min_age_s)}
    removed = cgroups.remove_groups(
        lambda group: group.partition(".")[2] in dead or _gone_box(folder, group))
    for name in sorted(dead):
        shutil.rmtree(boxes[name], ignore_errors=True)
        if not boxes[name].exists():
            removed.append(str(boxes[name]))
    return removed


def _gone_box(folder: Path, group_name: str) -> bool:
    """A group `<owner pid>.<box>` whose box is gone and whose owner pid is not running."""
    pid, _, box = group_name.partition(".")
    if not box.startswith(PREFIX) or not pid.isdigit() or (folder / box).exists():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def sweep_once() -> None:
    """The first call in a process sweeps the temporary folder; later calls do nothing."""
    global _swept
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    sweep()


__all__ = ["MIN_AGE_S", "PREFIX", "Box", "abandoned", "make_box", "sweep", "sweep_once"]
