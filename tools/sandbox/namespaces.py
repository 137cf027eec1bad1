"""The namespace launcher: what isolates a sandboxed child.

A PID namespace with a private ``/proc``, no network, a private IPC namespace, every
filesystem but the child's directory read-only (cgroup filesystems, ``/sys`` and
``/proc/sys`` included), a private ``/tmp`` holding that directory alone, a private
minimal ``/dev``, no capabilities, uid 65534 for a root verifier and, where the host
allows an unprivileged one, a user namespace of its own. It reaches the interpreter, the
virtualenv and the project wherever they are, under any number of directories others
cannot enter. Probed once by starting the interpreter in it, never assumed
(:func:`probe`); :mod:`tools.sandbox.launcher` puts :func:`prefix` before the child's
command, and :mod:`tools.sandbox.policy` refuses to run candidates where it fails.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

SANDBOX_UID = 65534  # nobody: the child's uid and gid where the verifier runs as root

# Runs as PID 1 of the new namespaces: join the sandbox's control groups (the cgroup.procs
# files before the first `--`) so everything it starts inherits them, make mounts private,
# then cover each directory the child must not look into with a tmpfs that holds only the
# entries it needs, bound back from the original (the groups before the second `--`: a
# directory, a count, that many paths relative to it). The covered directories are /tmp
# (so the child's /tmp holds its own folder and nothing else), the folder that holds the
# sandbox folders when it is not /tmp, and every directory others cannot enter on the way
# to the interpreter, the virtualenv or the project's code (any number of entries under one
# of them). Each original is reached through the shell's working directory, which stays in
# the covered mount (mount -c: a canonicalised path would resolve through the tmpfs). Then
# keep the sandbox directory writable, give it a private minimal /dev (plus the devices
# before the third `--`, an accelerator's, bound from the host's), make every other
# writable filesystem read-only (cgroup filesystems too: a group the child could write to
# would be no limit, so it refuses to run in one; /sys and /proc/sys as well) and check
# that nothing else stayed writable, then drop all capabilities and, when a uid is given,
# become that unprivileged user (with the groups given, an accelerator's; the parent-death
# signal is set again after: a uid change clears it), in a user namespace of its own
# where the host allows one.
_LAUNCHER = r"""
set -e
umask 022
box="$1"; uid="$2"; groups="$3"; userns="$4"; shift 4
joined=0
while [ "$1" != "--" ]; do echo 0 > "$1"; joined=1; shift; done; shift
mount --make-rprivate /
while [ "$1" != "--" ]; do
  dir="$1"; count="$2"; shift 2
  cd "$dir"
  mount -t tmpfs -o mode=755,size=1m,nosuid,nodev tmpfs "$dir"
  while [ "$count" -gt 0 ]; do
    if [ -d "./$1" ]; then mkdir -p "$dir/$1"; else mkdir -p "$(dirname "$dir/$1")"; touch "$dir/$1"; fi
    mount -c --rbind "./$1" "$dir/$1"; shift; count=$((count - 1))
  done
  cd /
done; shift
mount --bind "$box" "$box"
stage="$box/.kg-stage"
mkdir "$stage"; mount --rbind /dev "$stage"
mount -t tmpfs -o mode=755,size=64k,nosuid,noexec tmpfs /dev
for node in null:3 zero:5 full:7 random:8 urandom:9; do
  mknod -m 666 "/dev/${node%:*}" c 1 "${node#*:}"
done
while [ "$1" != "--" ]; do
  if [ -d "$stage/${1#/dev/}" ]; then mkdir -p "$1"; else touch "$1"; fi
  mount --rbind "$stage/${1#/dev/}" "$1"; shift
done; shift
umount -l "$stage"; rmdir "$stage"
ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr
for target in $(awk '$4 ~ /(^|,)rw(,|$)/ && $3 !~ /^(proc|devpts|devtmpfs)$/ {print $2}' /proc/self/mounts | sort -u); do
  [ "$target" = "$box" ] && continue
  mount -o remount,bind,ro "$target" 2>/dev/null || [ "$target" != "/" ]
done
mount -o remount,bind,ro /sys
mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys
if [ -e /proc/sysrq-trigger ]; then
  mount --bind /proc/sysrq-trigger /proc/sysrq-trigger
  mount -o remount,bind,ro /proc/sysrq-trigger
fi
if [ "$joined" = 1 ] && awk '@WRITABLE_CGROUPFS@' /proc/self/mounts; then
  echo "kg-sandbox: a cgroup filesystem stayed writable" >&2; exit 125
fi
left=""
for target in $(awk '@WRITABLE_ON_TOP@' /proc/self/mounts); do
  [ "$target" = "$box" ] && continue
  case "$target" in *\\*) ;; *) [ -e "$target" ] || continue ;; esac
  left="$left $target"
done
if [ -n "$left" ]; then
  echo "kg-sandbox: stayed writable:$left" >&2; exit 125
fi
cd "$box"
user=""
[ -n "$userns" ] && user="unshare --user --map-current-user --"
if [ -n "$uid" ]; then
  if [ -n "$groups" ]; then grouping="--groups=$groups"; else grouping="--clear-groups"; fi
  exec setpriv --reuid="$uid" --regid="$uid" "$grouping" --pdeathsig KILL \
    --bounding-set=-all --inh-caps=-all --no-new-privs -- $user "$@"
fi
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
"""
# awk on /proc/self/mounts: succeeds when some cgroup filesystem is mounted read-write.
_WRITABLE_CGROUPFS = "$3 ~ /^cgroup2?$/ && $4 ~ /(^|,)rw(,|$)/ {found=1} END {exit !found}"
# awk on /proc/self/mounts: the mount points whose topmost mount is writable (a covered
# mount is listed before what covers it; proc, devpts and device nodes are not filesystems
# a child can fill).
_WRITABLE_ON_TOP = ("$3 !~ /^(proc|devpts|devtmpfs|mqueue)$/ {top[$2] = ($4 ~ /(^|,)rw(,|$)/)} "
                    "END {for (t in top) if (top[t]) print t}")
_LAUNCHER = (_LAUNCHER.replace("@WRITABLE_CGROUPFS@", _WRITABLE_CGROUPFS)
             .replace("@WRITABLE_ON_TOP@", _WRITABLE_ON_TOP))


# The command that creates the namespaces (a test points it at one that does not exist,
# which is what a host without util-linux or without the rights looks like).
UNSHARE = "unshare"

# What the probe's child checks from inside, as the candidate would run: the interpreter
# and the project's code start, it is PID 1 of its namespace, it is uid 65534 when the
# verifier is root, nothing outside its folder takes a write, and /tmp holds its folder
# alone. It writes what it found into its folder; the parent judges.
_PROBE_CHILD = r"""
import json, os, sys
box = sys.argv[1]
import msgspec, tools.sandbox  # the project's code and its dependencies are reachable
facts = {"pid": os.getpid(), "uid": os.getuid(), "tmp": sorted(os.listdir("/tmp")),
         "writable": []}
for where in ("/", "/tmp", "/dev", os.path.dirname(box), os.path.dirname(sys.executable)):
    probe = os.path.join(where, f".kg-probe-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
    except OSError:
        continue
    facts["writable"].append(where)
    os.unlink(probe)
facts["userns"] = os.readlink("/proc/self/ns/user")
with open(os.path.join(box, "facts.json"), "w") as out:
    json.dump(facts, out)
"""


class Probe(NamedTuple):
    works: bool  # the full sandbox starts the interpreter and holds
    sealed: bool  # every cgroup filesystem is read-only for the child
    problem: str  # what failed, in one line ("" when it works)
    facts: dict[str, Any]


def namespaces_available() -> bool:
    """Whether the namespace launcher works here (probed once, with the interpreter)."""
    return probe().works


def cgroups_sealable() -> bool:
    """Whether the launcher leaves every cgroup filesystem read-only for the child."""
    return probe().sealed


@functools.cache
def probe() -> Probe:
    """Start the interpreter in the full sandbox once and check from inside what holds."""
    missing = [name for name in (UNSHARE, "setpriv") if not shutil.which(name)]
    if sys.platform != "linux":
        return Probe(False, False, f"namespaces are Linux's (this is {sys.platform})", {})
    if missing:
        return Probe(False, False, f"{' and '.join(missing)} not found (util-linux)", {})
    box = tempfile.mkdtemp(prefix="kg-probe-")
    if os.geteuid() == 0:
        os.chown(box, SANDBOX_UID, SANDBOX_UID)
    check = f'awk \'{_WRITABLE_CGROUPFS}\' /proc/self/mounts || touch "$0/sealed"; exec "$@"'
    try:
        out = subprocess.run(
            [*prefix(box, []), "/bin/sh", "-c", check, box,
             sys.executable, "-I", "-c", _PROBE_CHILD, box],
            capture_output=True, timeout=60, stdin=subprocess.DEVNULL, cwd=box,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        facts_file = Path(box, "facts.json")
        facts = json.loads(facts_file.read_text()) if facts_file.is_file() else {}
        problem = _judge(facts, box) if facts else _last_line(out.stderr) or (
            f"the sandboxed interpreter exited with status {out.returncode}")
        works = out.returncode == 0 and not problem
        return Probe(works, works and Path(box, "sealed").is_file(), problem, facts)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return Probe(False, False, f"the sandbox probe failed: {exc}", {})
    finally:
        shutil.rmtree(box, ignore_errors=True)


def _judge(facts: dict[str, Any], box: str) -> str:
    """What the probe's child saw that the full sandbox must not allow ("" when none)."""
    if facts.get("pid") != 1:
        return f"the child is not PID 1 of its own PID namespace (pid {facts.get('pid')})"
    if os.geteuid() == 0 and facts.get("uid") != SANDBOX_UID:
        return f"the child kept uid {facts.get('uid')} instead of {SANDBOX_UID}"
    if facts.get("writable"):
        return f"the child could write outside its folder: {', '.join(facts['writable'])}"
    tmp = os.path.realpath("/tmp")
    allowed = {os.path.relpath(p, tmp).split(os.sep)[0]
               for directory, entries in _covers(box) if directory == tmp
               for p in (os.path.join(tmp, e) for e in entries)}
    if not set(facts.get("tmp", ())) <= allowed:
        return f"the child's /tmp is not private (it holds {facts.get('tmp')})"
    return ""


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def user_namespace_available() -> bool:
    """Whether an unprivileged process may create a user namespace here (the child then
    runs in one of its own, where its mounts are locked)."""
    return _userns()


@functools.cache
def _userns() -> bool:
    if not shutil.which(UNSHARE):
        return False
    command = [UNSHARE, "--user", "--map-current-user", "--", "/bin/true"]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            return False
        command = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                   "--clear-groups", "--", *command]
    try:
        return subprocess.run(command, capture_output=True, timeout=30, cwd="/",
                              stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def prefix(box: str, join: Sequence[str], devices: Sequence[str] = ()) -> list[str]:
    """The command prefix that runs a command in the namespaces, joined to the control
    groups whose ``cgroup.procs`` files are ``join``, with ``devices`` in its /dev."""
    uid = str(SANDBOX_UID) if drops_uid(devices) else ""
    groups = ",".join(str(g) for g in device_groups(devices)) if uid else ""
    userns = "1" if uid and _userns() else ""
    covers = [part for directory, entries in _covers(box)
              for part in (directory, str(len(entries)), *entries)]
    return [
        UNSHARE, "--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc",
        "--mount", "--", "/bin/sh", "-c", _LAUNCHER, "kg-sandbox", box, uid, groups, userns,
        *join, "--", *covers, "--", *devices, "--",
    ]


def accelerator_devices() -> list[str]:
    """The host's accelerator device nodes (TPU, NVIDIA GPU, VFIO), for a timing child."""
    import glob

    found = [*glob.glob("/dev/accel*"), *glob.glob("/dev/nvidia*"), *glob.glob("/dev/dri")]
    if os.path.isdir("/dev/vfio"):
        found.append("/dev/vfio")
    return sorted(p for p in found if p.startswith("/dev/") and "/.." not in p)


def drops_uid(devices: Sequence[str]) -> bool:
    """Root verifiers hand the child uid 65534, unless a device it needs is usable neither
    by others nor by a group other than root's (then it keeps uid 0, without capabilities:
    not the full sandbox, so only an explicit opt-in runs it)."""
    if os.geteuid() != 0:
        return False
    return all(gid is not None for _, gid in _device_access(devices))


def device_groups(devices: Sequence[str]) -> list[int]:
    """The groups the child joins to use ``devices`` (those not usable by others)."""
    return sorted({gid for _, gid in _device_access(devices) if gid})


def _device_access(devices: Sequence[str]) -> list[tuple[str, int | None]]:
    """(node, how uid 65534 can use it): 0 as anyone, a group id through that group, None
    not at all."""
    found: list[tuple[str, int | None]] = []
    for device in devices:
        paths = ([os.path.join(device, n) for n in os.listdir(device)]
                 if os.path.isdir(device) else [device])
        for path in paths:
            try:
                info = os.stat(path)
            except OSError:
                continue
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o006 == 0o006:
                found.append((path, 0))
            elif mode & 0o060 == 0o060 and info.st_gid != 0:
                found.append((path, info.st_gid))
            else:
                found.append((path, None))
    return found


@functools.cache
def _needed_paths() -> list[str]:
    """What the child must reach: the interpreter (each link on the way to it), its
    installation, the virtualenv, every directory on the import path (site-packages and
    what .pth files add, wherever they are) and the project's code."""
    import tools

    found = {sys.prefix, sys.base_prefix, sys.exec_prefix,
             str(Path(tools.__file__).resolve().parent.parent)}
    link = sys.executable
    for _ in range(40):
        found.add(os.path.join(os.path.realpath(os.path.dirname(link)), os.path.basename(link)))
        if not os.path.islink(link):
            break
        link = os.path.join(os.path.dirname(link), os.readlink(link))
    # the import path a `python -I` child gets: not the script's folder, not PYTHONPATH
    ignored = {sys.path[0] if sys.path else "", *os.environ.get("PYTHONPATH", "").split(":")}
    found.update(entry for entry in sys.path
                 if entry and os.path.isabs(entry) and entry not in ignored)
    found.update(_mapped_files())
    real = {os.path.realpath(p) for p in found if os.path.exists(p)}
    return sorted(real | {p for p in found if os.path.islink(p)})


def _mapped_files() -> set[str]:
    """The shared libraries this interpreter loaded (libpython found through an absolute
    RUNPATH, say), outside /tmp: the child's interpreter loads the same ones."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 else ""
        if path.startswith("/") and ".so" in path and not path.startswith(("/tmp/", "/dev/")):
            found.add(path)
    return {p for p in found if os.path.isfile(p)}


def _hidden_ancestors(paths: Sequence[str]) -> list[tuple[str, str]]:
    """(directory, rest of the path) for each path with a directory on the way that others
    cannot enter, the outermost such: the launcher covers it with a tmpfs that holds only
    the paths below it that the child needs, however many and however deep."""
    found: list[tuple[str, str]] = []
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts)):
            directory = str(Path(*parts[:depth]))
            try:
                enterable = os.stat(directory).st_mode & stat.S_IXOTH
            except OSError:
                break
            if not enterable:
                found.append((directory, str(Path(*parts[depth:]))))
                break
    return sorted(set(found), key=lambda pair: (pair[0].count("/"), pair))


def _covers(box: str) -> list[tuple[str, list[str]]]:
    """The directories the launcher covers with a tmpfs, outermost first, each with the
    paths below it bound back: /tmp (the sandbox folder and needed paths under it only), the
    folder of sandbox folders, and the outermost directory others cannot enter on the way to
    each needed path. No cover lies inside another; a needed path inside a covered
    directory is bound back whole."""
    tmp = os.path.realpath("/tmp")
    # a needed path that holds the sandbox folder would expose the folders beside it
    needed = [*(p for p in _needed_paths() if p != box and not _under(box, p)), box]
    roots = {tmp, os.path.dirname(box)}
    roots.update(directory for directory, _ in _hidden_ancestors(needed))
    outer = sorted(r for r in roots if not any(_under(r, o) for o in roots if o != r))
    covers = []
    for root in outer:
        below = sorted(os.path.relpath(p, root) for p in needed if _under(p, root))
        kept = [p for p in below if not any(_under(p, q) for q in below if q != p)]
        covers.append((root, kept))
    return sorted(covers, key=lambda c: (c[0].count("/"), c[0]))


def _under(path: str, directory: str) -> bool:
    return path != directory and path.startswith(directory.rstrip("/") + "/")
