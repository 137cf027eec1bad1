"""Limits on a whole process tree (control groups), so forking cannot multiply per-process ones.

RLIMIT_AS binds each process alone, and a child running as root ignores RLIMIT_NPROC, so a
candidate that forks could take the machine's memory or fill its process table. A
per-sandbox group caps the memory of the tree together and the number of tasks (processes
and threads) it may hold. Each controller is used where a writable hierarchy offers it
(cgroup v1 ``memory``/``pids``, or v2 with the controller available to the caller's group);
where none does, nothing is claimed and nothing fails.

The group lives under the caller's own group in each hierarchy (so any outer limit still
holds), as ``kernelgraph/<owner pid>.<name>``. The child's launcher joins it before it execs
anything, so every descendant inherits it with no window; :meth:`TreeGroup.close` kills
whatever is left in it and removes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

PARENT = "kernelgraph"
_CONTROLLERS = ("memory", "pids")
_EMPTY_WAIT_S = 5.0


@dataclass(frozen=True)
class Hierarchy:
    """Where the caller's own group is in one mounted hierarchy, and what it can limit."""

    version: int  # 1 or 2
    base: Path
    controllers: frozenset[str]


@dataclass
class TreeGroup:
    """One sandbox's group: a directory per hierarchy used, and what was limited."""

    dirs: list[tuple[Hierarchy, Path]] = field(default_factory=list)
    limited: list[str] = field(default_factory=list)  # "memory", "pids"

    @property
    def procs_files(self) -> list[str]:
        """The files the child writes `0` into to join (one per hierarchy)."""
        return [str(path / "cgroup.procs") for _, path in self.dirs]

    @property
    def isolation(self) -> list[str]:
        return [f"cgroup-{name}" for name in self.limited]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(str(path) for _, path in self.dirs)

    def oom_kills(self) -> int:
        """Processes the kernel killed because the tree passed its memory limit."""
        for hierarchy, path in self.dirs:
            if "memory" in self.limited and "memory" in hierarchy.controllers:
                name = "memory.oom_control" if hierarchy.version == 1 else "memory.events"
                return _keyed(path / name).get("oom_kill", 0)
        return 0

    def task_limit_hits(self) -> int:
        """Forks and thread starts refused because the tree held `max_tasks` tasks."""
        for hierarchy, path in self.dirs:
            if "pids" in self.limited and "pids" in hierarchy.controllers:
                return _keyed(path / "pids.events").get("max", 0)
        return 0

    def peaks(self) -> dict[str, int]:
        """The most tasks and memory the tree held at once (where the kernel reports it)."""
        found: dict[str, int] = {}
        for hierarchy, path in self.dirs:
            names = {"tasks": "pids.peak",
                     "memory_bytes": ("memory.max_usage_in_bytes" if hierarchy.version == 1
                                      else "memory.peak")}
            for key, name in names.items():
                value = _read_int(path / name)
                if value is not None and key not in found:
                    found[key] = value
        return found

    def close(self) -> None:
        """Kill every process still in the group, then remove its directories."""
        self.kill_members()
        for _, path in self.dirs:
            _remove(path)
        self.dirs.clear()

    def kill_members(self) -> None:
        """SIGKILL whatever is in the group until it is empty (or a few seconds pass)."""
        deadline = time.monotonic() + _EMPTY_WAIT_S
        while True:
            pids = self._members()
            if not pids or time.monotonic() > deadline:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def _members(self) -> set[int]:
        pids: set[int] = set()
        for _, path in self.dirs:
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in (path / "cgroup.procs").read_text().split())
        pids.discard(os.getpid())
        return pids


def create(name: str, *, memory_bytes: int | None, max_tasks: int | None) -> TreeGroup:
    """A new group limiting what can be limited here (possibly nothing); never raises."""
    group = TreeGroup()
    wanted = {"memory": memory_bytes, "pids": max_tasks}
    taken: set[str] = set()
    for hierarchy in hierarchies():
        usable = {c for c in hierarchy.controllers - taken if wanted.get(c) is not None}
        if not usable:
            continue
        path = _make_dir(hierarchy, f"{os.getpid()}.{name}", usable)
        if path is None:
            continue
        applied = [c for c in sorted(usable)
                   if _apply(hierarchy.version, path, c, int(wanted[c] or 0))]
        if not applied:
            _remove(path)
            continue
        group.dirs.append((Hierarchy(hierarchy.version, hierarchy.base, frozenset(applied)),
                           path))
        group.limited.extend(applied)
        taken.update(applied)
    return group


def leftover_groups(owner_pid: int | None = None) -> list[str]:
    """Groups this process (or `owner_pid`) made that still exist: always empty, or a leak."""
    prefix = f"{os.getpid() if owner_pid is None else owner_pid}."
    found = []
    for hierarchy in hierarchies():
        parent = hierarchy.base / PARENT
        with contextlib.suppress(OSError):
            found += [str(p) for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    return sorted(found)


def remove_groups(abandoned: Callable[[str], bool]) -> list[str]:
    """Kill the members of, and remove, every group under this caller's hierarchies whose
    name (`<owner pid>.<box>`) `abandoned` says its launcher left behind."""
    removed = []
    for hierarchy in hierarchies():
        parent = hierarchy.base / PARENT
        try:
            names = [p.name for p in parent.iterdir() if p.is_dir()]
        except OSError:
            continue
        for name in sorted(names):
            if not abandoned(name):
                continue
            path = parent / name
            TreeGroup([(hierarchy, path)]).close()
            if not path.exists():
                removed.append(str(path))
    return removed


def hierarchies() -> list[Hierarchy]:
    """The mounted, writable hierarchies with a controller we use, at the caller's group."""
    own = _own_groups()
    found: list[Hierarchy] = []
    seen: set[tuple[int, str]] = set()
    for root, mount_point, fstype, options in _cgroup_mounts():
        if fstype == "cgroup":
            controllers = frozenset(c for c in _CONTROLLERS if c in options)
            key = next((k for k in own if k[0] == 1 and set(k[1].split(",")) & controllers),
                       None)
            version = 1
        else:
            key = next((k for k in own if k[0] == 2), None)
            version = 2
            controllers = frozenset()
        if key is None or (version, key[1]) in seen:
            continue
        relative = _relative(own[key], root)
        if relative is None:
            continue
        base = Path(mount_point, relative.lstrip("/"))
        if version == 2:
            available = set(_read(base / "cgroup.controllers").split())
            controllers = frozenset(c for c in _CONTROLLERS if c in available)
        if controllers and os.access(base, os.W_OK):
            seen.add((version, key[1]))
            found.append(Hierarchy(version, base, controllers))
    return found


def _cgroup_mounts() -> Iterable[tuple[str, str, str, set[str]]]:
    """(root, mount point, fstype, options) of each read-write cgroup mount."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        if "rw" not in fields[5].split(","):
            continue
        mounts.append((_unescape(fields[3]), _unescape(fields[4]), tail[0],
                       set(tail[2].split(","))))
    return mounts


def _own_groups() -> dict[tuple[int, str], str]:
    """{(version, controller list): path} from /proc/self/cgroup."""
    groups: dict[tuple[int, str], str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return groups
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            groups[(2, "")] = path
        elif controllers:
            groups[(1, controllers)] = path
    return groups


def _relative(path: str, root: str) -> str | None:
    if root == "/":
        return path
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")):] or "/"
    return None


def _make_dir(hierarchy: Hierarchy, name: str, controllers: set[str]) -> Path | None:
    parent = hierarchy.base / PARENT
    for _ in range(3):  # another sandbox may remove an empty parent between our two mkdirs
        try:
            parent.mkdir(exist_ok=True)
            if hierarchy.version == 2:
                enable = " ".join(f"+{c}" for c in sorted(controllers))
                for level in (hierarchy.base, parent):
                    if not controllers <= set(_read(level / "cgroup.subtree_control").split()):
                        (level / "cgroup.subtree_control").write_text(enable)
            path = parent / name
            path.mkdir()
            return path
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None


def _apply(version: int, path: Path, controller: str, value: int) -> bool:
    """Write one limit; False (and nothing claimed) where the kernel refuses it."""
    if version == 1:
        writes = ([("memory.limit_in_bytes", value), ("memory.memsw.limit_in_bytes", value)]
                  if controller == "memory" else [("pids.max", value)])
    else:
        writes = ([("memory.max", value), ("memory.swap.max", 0)]
                  if controller == "memory" else [("pids.max", value)])
    first, *optional = writes
    try:
        (path / first[0]).write_text(str(first[1]))
    except OSError:
        return False
    for name, number in optional:  # swap accounting may be off: the file is then missing
        if (path / name).exists():
            try:
                (path / name).write_text(str(number))
            except OSError:
                return False
    return True


def _remove(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.02)  # tasks just killed can take a moment to leave
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the shared parent, once no sandbox uses it


def _keyed(path: Path) -> dict[str, int]:
    values = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


def _read_int(path: Path) -> int | None:
    try:
        return int(_read(path).strip())
    except ValueError:
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape") if "\\" in text else text
