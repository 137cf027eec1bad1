"""Run untrusted code in a child process that returns data only.

The child gets a fresh temporary directory holding its request, a wall-clock limit (the
whole process tree is killed when it passes), an address-space limit (RLIMIT_AS), a CPU
limit, a file-size limit, a limit on what its directory may hold (polled; the tree is
killed when it passes, so it overshoots by at most one poll's worth of writing) and an
environment rebuilt from an allowlist with every credential-looking variable removed.
It also runs in the namespace sandbox (:mod:`tools.sandbox.namespaces`): its own PID
namespace with a private ``/proc`` (so it cannot read another process's environment), no
network, every filesystem except its directory read-only, a private ``/tmp`` holding that
directory alone, no capabilities and uid 65534. That is not optional: where it cannot be
built nothing runs (:mod:`tools.sandbox.policy`), unless the user opted in to the weaker
rest, which the isolation list then names. Where a writable cgroup hierarchy offers it,
the whole process tree also shares one memory limit and one limit on its tasks
(:mod:`tools.sandbox.cgroups`): per-process limits alone let a candidate multiply them by
forking. What was applied is reported in :attr:`SandboxResult.isolation`; it is probed,
never assumed. A child may also be started before its request exists (:class:`Mailbox`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tools.sandbox import boxes, cgroups, namespaces, policy
from tools.sandbox.mailbox import (
    REQUEST_FILE,
    Mailbox,
    read_regular_file,
)
from tools.sandbox.namespaces import (  # noqa: F401  (part of this module's interface)
    SANDBOX_UID,
    accelerator_devices,
    cgroups_sealable,
    namespaces_available,
)

RESULT_FILE = "result.bin"
_TAIL = 4000

_ALLOWED_PREFIXES = (
    "PATH", "LANG", "LC_", "TZ", "XLA_", "JAX_", "TPU_", "LIBTPU", "CUDA_", "NVIDIA_",
    "LD_LIBRARY_PATH", "OMP_", "MKL_", "OPENBLAS_", "TF_CPP_",
)
_SECRET_WORDS = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT", re.IGNORECASE
)
_SECRET_PREFIXES = (
    "GOOGLE_", "GEMINI_", "NATS_", "AWS_", "AZURE_", "OPENAI_", "ANTHROPIC_", "HF_",
    "HUGGING", "GITHUB_", "GH_", "GCP_", "GCLOUD", "CLOUDSDK_", "QDRANT_",
)
# Without namespaces: join the control groups, then run the command.
_JOINER = 'set -e; while [ "$1" != "--" ]; do echo 0 > "$1"; shift; done; shift; exec "$@"'


def _default_max_tasks() -> int:
    return max(512, 16 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class Limits:
    wall_s: float = 300.0
    memory_bytes: int = 4 << 30
    file_bytes: int = 1 << 30
    disk_bytes: int = 2 << 30  # the whole sandbox directory (result, stdout, stderr, scratch)
    # The whole process tree together (a cgroup, where one is writable); None: memory_bytes.
    total_memory_bytes: int | None = None
    # Processes and threads of the tree together (cgroup pids.max). An honest verification
    # child peaks at 21 tasks on 2 cores (JAX adds about 4 threads per core to 9 fixed).
    max_tasks: int = field(default_factory=_default_max_tasks)
    # The wall the CPU-time backstop is sized for, where a delivery may extend the wall
    # (:meth:`Mailbox.deliver`); None: wall_s.
    cpu_wall_s: float | None = None

    @property
    def tree_memory_bytes(self) -> int | None:
        """The tree's memory limit, or None for none (RLIM_INFINITY or 0)."""
        total = self.memory_bytes if self.total_memory_bytes is None else self.total_memory_bytes
        return total if total > 0 else None

    def describe(self) -> dict[str, float | int | None]:
        return {"wall_s": self.wall_s, "memory_bytes": self.memory_bytes,
                "file_bytes": self.file_bytes, "disk_bytes": self.disk_bytes,
                "total_memory_bytes": self.tree_memory_bytes, "max_tasks": self.max_tasks}


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    timed_out: bool
    result: bytes | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    limits: Limits
    isolation: tuple[str, ...] = field(default_factory=tuple)
    disk_exceeded: bool = False
    oom_kills: int = 0  # processes the kernel killed at the tree's memory limit
    task_limit_hits: int = 0  # forks and thread starts refused at the tree's task limit
    tree_peak: dict[str, int] = field(default_factory=dict)  # "tasks", "memory_bytes"
    groups: tuple[str, ...] = ()  # the cgroup directories used (removed by now)
    # CPU seconds of the process tree (user + system, every process it waited for) when it
    # exited by itself; None when it was killed
    cpu_s: float | None = None

    @property
    def ok(self) -> bool:
        # A tree that hit a limit is a failure even if its first process exited cleanly:
        # the work it claims may rest on children that were killed or never started.
        return (self.returncode == 0 and self.result is not None and not self.timed_out
                and not self.disk_exceeded and not self.oom_kills and not self.task_limit_hits)

    def failure(self) -> str:
        """Why no result came back, in words (empty when it did)."""
        if self.ok:
            return ""
        if self.timed_out:
            return (f"did not finish within the time limit of {self.limits.wall_s:g} s "
                    "(killed)")
        if self.disk_exceeded:
            return (f"wrote more than the disk limit of {self.limits.disk_bytes / (1 << 30):g} "
                    "GiB into its directory (killed)")
        if self.oom_kills:
            total = (self.limits.tree_memory_bytes or 0) / (1 << 30)
            return (f"exceeded the memory limit of its process tree ({total:g} GiB for all its "
                    f"processes together; {self.oom_kills} killed)")
        if self.task_limit_hits:
            return (f"exceeded the task limit of its process tree ({self.limits.max_tasks} "
                    f"processes and threads; {self.task_limit_hits} refused)")
        gib = self.limits.memory_bytes / (1 << 30)
        if looks_like_memory_exhaustion(self.stderr_tail):
            return f"exceeded the memory limit of {gib:g} GiB (killed by the allocator)"
        if self.returncode is not None and self.returncode < 0:
            name = signal.Signals(-self.returncode).name
            return f"child process died from {name} (memory limit {gib:g} GiB)"
        if self.result is None:
            return f"child process exited with status {self.returncode} and no result"
        return f"child process exited with status {self.returncode}"


def looks_like_memory_exhaustion(text: str) -> bool:
    return any(s in text for s in ("MemoryError", "bad_alloc", "RESOURCE_EXHAUSTED",
                                   "Cannot allocate memory", "Out of memory"))


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: allowlisted, nothing secret, no cache (:mod:`tools.compilecache`)."""
    source = os.environ if env is None else env
    kept = {}
    for name, value in source.items():
        if not name.startswith(_ALLOWED_PREFIXES) or "CACHE" in name.upper():
            continue
        if _SECRET_WORDS.search(name) or name.upper().startswith(_SECRET_PREFIXES):
            continue
        kept[name] = value
    kept.setdefault("PATH", "/usr/bin:/bin")
    return {**kept, "JAX_ENABLE_COMPILATION_CACHE": "false"}


def run_sandboxed(
    module: str,
    request: bytes | None,
    *,
    files: Mapping[str, bytes] | None = None,
    limits: Limits | None = None,
    isolate: bool = True,
    mailbox: Mailbox | None = None,
    devices: Sequence[str] = (),
) -> SandboxResult:
    """Run ``python -I -m module BOXDIR`` on ``request`` and return what it wrote back.

    ``request=None`` with a ``mailbox``: the request comes later, through the mailbox.
    ``devices``: host device nodes the child also sees in its private /dev.

    Fails closed: without the full sandbox (``isolate=False`` included) it raises
    :class:`~tools.sandbox.policy.SandboxUnavailable` before anything is written or started,
    unless the user opted in (:func:`tools.sandbox.policy.weak_allowed`)."""
    limits = limits or Limits()
    full = policy.require(devices) if isolate else _weak_only()
    held = boxes.make_box()  # 0700, its owner's alone, locked while this launcher lives
    box = held.path
    group = cgroups.TreeGroup()
    try:
        if request is not None:
            (box / REQUEST_FILE).write_bytes(request)
        for name, data in (files or {}).items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"{name=} must be a plain file name")
            (box / name).write_bytes(data)
        env = scrubbed_env()
        env.update(HOME=str(box), TMPDIR=str(box), PYTHONDONTWRITEBYTECODE="1",
                   JAX_PLATFORMS="cpu")
        command = [sys.executable, "-I", "-m", module, str(box)]
        isolation = ["env-scrubbed", "rlimits", "own-session"]
        namespaced = isolate and namespaces.namespaces_available()
        if not full:
            isolation.append(policy.WEAK_LABEL)
        # In namespaces the launcher seals the cgroup filesystems read-only; a group the
        # child could write to (namespaces there but unsealable) would be no limit.
        if not namespaced or namespaces.cgroups_sealable():
            group = cgroups.create(box.name, memory_bytes=limits.tree_memory_bytes,
                                   max_tasks=limits.max_tasks)
        if namespaced:
            command = namespaces.prefix(str(box), group.procs_files, devices) + command
            isolation += ["pid-namespace", "private-proc", "no-network", "read-only-fs",
                          "private-dev", "read-only-sys", "no-capabilities", "private-tmp"]
            if namespaces.drops_uid(devices):
                os.chown(box, SANDBOX_UID, SANDBOX_UID)
                isolation.append(f"uid-{SANDBOX_UID}")
                if namespaces.user_namespace_available():
                    isolation.append("user-namespace")
        elif group.procs_files:
            command = ["/bin/sh", "-c", _JOINER, "kg-join", *group.procs_files, "--", *command]
        isolation += group.isolation
        prlimit = shutil.which("prlimit")
        if prlimit:
            command = [prlimit, *_prlimit_args(limits), "--", *command]
        command = _die_with_parent(command)
        started = time.monotonic()
        # The parent keeps its own descriptors on the child's stdout and stderr files and
        # reads only through them: the child may replace the paths (a link to a secret, a
        # FIFO), never the open files.
        out_fd, err_fd = _output_file(box / "stdout.txt"), _output_file(box / "stderr.txt")
        try:
            proc = subprocess.Popen(
                command, cwd=box, env=env, stdin=subprocess.DEVNULL, stdout=out_fd,
                stderr=err_fd, start_new_session=True, close_fds=True,
                # prlimit applies the limits without running Python between fork and exec
                # (unsafe in a process with JAX's threads); the hook is the fallback.
                preexec_fn=None if prlimit else functools.partial(_limit_child, limits),
            )
            if mailbox is not None:
                mailbox._attach(box, proc)
            timed_out = disk_exceeded = False
            deadline = started + limits.wall_s
            disk_checked = started
            cpu_s = None
            try:
                while True:
                    if mailbox is not None:
                        deadline = mailbox.deadline(started, limits.wall_s)
                    reaped, cpu_s = _reap(proc)
                    if reaped:
                        break
                    now = time.monotonic()
                    if now - disk_checked >= _DISK_POLL_S:
                        disk_checked = now
                        if _over_budget(box, limits.disk_bytes):
                            disk_exceeded = True
                            _kill_tree(proc)
                            break
                    if now >= deadline:
                        timed_out = True
                        _kill_tree(proc)
                        break
                    time.sleep(min(_REAP_POLL_S, max(0.0, deadline - now)))
            finally:
                if proc.poll() is None:
                    _kill_tree(proc)
            delivered = mailbox.delivered_at if mailbox is not None else None
            wall = time.monotonic() - (started if delivered is None else delivered)
            if mailbox is not None and mailbox.delivered_wall_s is not None:
                limits = replace(limits, wall_s=mailbox.delivered_wall_s)
            group.kill_members()  # anything that left the session: before reading what came back
            result = None
            if proc.returncode == 0 and not timed_out and not disk_exceeded:
                result = read_regular_file(box / RESULT_FILE, limits.file_bytes)
            stdout_tail, stderr_tail = _tail(out_fd), _tail(err_fd)
        finally:
            os.close(out_fd)
            os.close(err_fd)
        return SandboxResult(
            returncode=proc.returncode,
            timed_out=timed_out,
            result=result,
            stdout_tail=stdout_tail,
            stderr_tail=stderr_tail,
            wall_s=wall,
            limits=limits,
            isolation=tuple(isolation),
            disk_exceeded=disk_exceeded,
            cpu_s=cpu_s,
            oom_kills=group.oom_kills(),
            task_limit_hits=group.task_limit_hits(),
            tree_peak=group.peaks(),
            groups=group.paths,
        )
    finally:
        group.close()
        held.remove()


def _weak_only() -> bool:
    """A caller that asked for no namespaces runs only with the user's opt-in."""
    if not policy.weak_allowed():
        raise policy.SandboxUnavailable(policy.refusal("the caller asked for no namespaces"))
    return False


def _cpu_seconds(limits: Limits) -> int:
    wall = max(limits.wall_s, limits.cpu_wall_s or 0.0)
    return int(wall * 2) + 10  # two cores' worth of the wall limit, as a backstop


def _prlimit_args(limits: Limits) -> list[str]:
    cpu = _cpu_seconds(limits)
    return [f"--as={limits.memory_bytes}", f"--cpu={cpu}:{cpu + 5}",
            f"--fsize={limits.file_bytes}", "--core=0"]


def _limit_child(limits: Limits) -> None:
    """Fallback when `prlimit` is missing: runs in the forked child before exec."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    cpu = _cpu_seconds(limits)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


_DISK_POLL_S = 0.25
_REAP_POLL_S = 0.02
_MAX_ENTRIES = 100_000


def _over_budget(box: Path, budget: int) -> bool:
    """Whether the directory tree holds more than `budget` bytes (or absurdly many entries)."""
    total = entries = 0
    stack = [str(box)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    if entries > _MAX_ENTRIES:
                        return True
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
        if total > budget:
            return True
    return total > budget


def _reap(proc: subprocess.Popen[bytes]) -> tuple[bool, float | None]:
    """(whether the child has exited, its tree's CPU seconds): reaped here with wait4, which
    reports the resources it and its waited-for descendants used."""
    try:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: no figure, but it is gone
        proc.poll()
        return True, None
    if pid == 0:
        return False, None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return True, usage.ru_utime + usage.ru_stime


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _output_file(path: Path) -> int:
    """A new file for the child's output, opened by the parent before the child exists."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _tail(fd: int) -> str:
    """The last bytes of an output file, through the parent's own descriptor."""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, _TAIL, max(0, size - _TAIL)).decode(errors="replace")
    except OSError:
        return ""


def _die_with_parent(command: list[str]) -> list[str]:
    """Prefix that makes the child's first process get SIGKILL when the verifier dies (the
    signal survives the execs of prlimit, unshare and sh; unshare's --kill-child and the PID
    namespace carry it to everything inside)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else command
