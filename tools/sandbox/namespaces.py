"""The namespace launcher: what isolates a sandboxed child where the host allows it.

A PID namespace with a private ``/proc``, no network, a private IPC namespace, every
filesystem but the child's directory read-only (cgroup filesystems, ``/sys`` and
``/proc/sys`` included), a private minimal ``/dev``, no capabilities and, for a root
verifier, an unprivileged uid. Probed once, never assumed (:func:`namespaces_available`);
:mod:`tools.sandbox.launcher` puts :func:`prefix` before the child's command.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

SANDBOX_UID = 65534  # nobody: the child's uid and gid where the verifier runs as root

# Runs as PID 1 of the new namespaces: join the sandbox's control groups (the cgroup.procs
# files before the first `--`) so everything it starts inherits them, make mounts private,
# keep the sandbox directory writable, put a tmpfs over each directory others cannot enter
# that holds something the child needs (the pairs before the second `--`: that directory
# and the one entry of it bound back, so the interpreter under a private home is reachable
# and nothing else there is), give it a private minimal /dev (plus the devices before the
# third `--`, an accelerator's, bound from the host's), make every other writable
# filesystem read-only (cgroup filesystems too: a group the child could write to would be
# no limit, so it refuses to run in one; /sys and /proc/sys as well), then drop all
# capabilities and, when a uid is given, become that unprivileged user (the parent-death
# signal is set again after: a uid change clears it).
_LAUNCHER = r"""
set -e
box="$1"; uid="$2"; shift 2
joined=0
while [ "$1" != "--" ]; do echo 0 > "$1"; joined=1; shift; done; shift
mount --make-rprivate /
mount --bind "$box" "$box"
stage="$box/.kg-stage"
while [ "$1" != "--" ]; do
  mkdir "$stage"; mount --rbind "$1" "$stage"
  mount -t tmpfs -o mode=711,size=64k tmpfs "$1"
  mkdir "$1/$2"; mount --rbind "$stage/$2" "$1/$2"
  umount -l "$stage"; rmdir "$stage"; shift 2
done; shift
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
if [ -n "$uid" ]; then
  exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --pdeathsig KILL \
    --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
fi
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
"""
# awk on /proc/self/mounts: succeeds when some cgroup filesystem is mounted read-write.
_WRITABLE_CGROUPFS = "$3 ~ /^cgroup2?$/ && $4 ~ /(^|,)rw(,|$)/ {found=1} END {exit !found}"
_LAUNCHER = _LAUNCHER.replace("@WRITABLE_CGROUPFS@", _WRITABLE_CGROUPFS)


def namespaces_available() -> bool:
    """Whether the namespace launcher works here (probed once with a no-op)."""
    return _probe()[0]


def cgroups_sealable() -> bool:
    """Whether the launcher leaves every cgroup filesystem read-only for the child."""
    return _probe()[1]


@functools.cache
def _probe() -> tuple[bool, bool]:
    if sys.platform != "linux" or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False, False
    box = tempfile.mkdtemp(prefix="kg-probe-")
    if os.geteuid() == 0:
        os.chown(box, SANDBOX_UID, SANDBOX_UID)
    script = f'touch "$0/ok"; awk \'{_WRITABLE_CGROUPFS}\' /proc/self/mounts || touch "$0/sealed"'
    try:
        probe = subprocess.run(
            [*prefix(box, []), "/bin/sh", "-c", script, box],
            capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
        )
        works = probe.returncode == 0 and Path(box, "ok").is_file()
        return works, works and Path(box, "sealed").is_file()
    except (OSError, subprocess.TimeoutExpired):
        return False, False
    finally:
        shutil.rmtree(box, ignore_errors=True)


def prefix(box: str, join: Sequence[str], devices: Sequence[str] = ()) -> list[str]:
    """The command prefix that runs a command in the namespaces, joined to the control
    groups whose ``cgroup.procs`` files are ``join``, with ``devices`` in its /dev."""
    uid = str(SANDBOX_UID) if drops_uid(devices) else ""
    overlays = [part for pair in _hidden_ancestors(_needed_paths()) for part in pair]
    return [
        "unshare", "--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc",
        "--mount", "--", "/bin/sh", "-c", _LAUNCHER, "kg-sandbox", box, uid, *join, "--",
        *overlays, "--", *devices, "--",
    ]


def accelerator_devices() -> list[str]:
    """The host's accelerator device nodes (TPU, NVIDIA GPU, VFIO), for a timing child."""
    import glob

    found = [*glob.glob("/dev/accel*"), *glob.glob("/dev/nvidia*"), *glob.glob("/dev/dri")]
    if os.path.isdir("/dev/vfio"):
        found.append("/dev/vfio")
    return sorted(p for p in found if p.startswith("/dev/") and "/.." not in p)


def drops_uid(devices: Sequence[str]) -> bool:
    """Root verifiers hand the child uid 65534, unless a device it needs is not usable by
    others (then it keeps uid 0, without capabilities, and the receipt does not claim it)."""
    if os.geteuid() != 0:
        return False
    for device in devices:
        paths = ([os.path.join(device, n) for n in os.listdir(device)]
                 if os.path.isdir(device) else [device])
        for path in paths:
            with contextlib.suppress(OSError):
                if stat.S_IMODE(os.stat(path).st_mode) & 0o006 != 0o006:
                    return False
    return True


def _needed_paths() -> list[str]:
    """What the child must reach: the interpreter, its installation, the project's code."""
    import tools

    found = {os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, sys.exec_prefix,
             str(Path(tools.__file__).resolve().parent.parent)}
    return sorted(os.path.realpath(p) for p in found)


def _hidden_ancestors(paths: Sequence[str]) -> list[tuple[str, str]]:
    """(directory, entry) for each directory on the way to ``paths`` that others cannot
    enter, outermost first: the launcher covers it with a tmpfs holding only that entry."""
    found: list[tuple[str, str]] = []
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts) - 1):
            directory = str(Path(*parts[:depth]))
            try:
                enterable = os.stat(directory).st_mode & stat.S_IXOTH
            except OSError:
                break
            if not enterable and (directory, parts[depth]) not in found:
                found.append((directory, parts[depth]))
    return sorted(found, key=lambda pair: (pair[0].count("/"), pair))
