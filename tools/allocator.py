"""glibc's malloc told to keep freed memory in the command's own process.

Freezing a suite makes and drops large NumPy and XLA arrays over and over: the oracle's
widened inputs and outputs, the perturbed and planted inputs, the comparisons. glibc serves
every block over 32 MiB with an ``mmap`` of its own and unmaps it when freed, and gives the
heap's top back to the system, so each such array is faulted in again page by page and every
page zeroed. Freezing JAXBench's ragged paged attention (7p) took 34 million page faults and
116 s of system time beside 162 s of compute (``benchmarks/allocator.py``).

:data:`TUNABLES` turn that off: no ``mmap`` per block and no trimming, so a freed array's
memory is reused without a fault. The process keeps its peak, which it had reached anyway.
glibc's arenas stay as they are: with one arena for every thread the same freeze faults
least, but two runs side by side in one process, as ``bench --jobs 2`` has them, then wait
on its lock for longer than that saves.

glibc reads ``GLIBC_TUNABLES`` only when a process starts, so the command line starts itself
again with them, first thing (:func:`reexec_tuned`, from :mod:`kernelgraph.launch`); what it
spawns of its own (bench's task checks) inherits them. The sandboxed children do not: their
environment is an allowlist (:func:`tools.sandbox.launcher.scrubbed_env`). A tunable the user
set is kept as set; ``KG_MALLOC=system`` leaves glibc's defaults alone.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

ENV = "GLIBC_TUNABLES"
OPT_OUT_ENV = "KG_MALLOC"
OPT_OUT_VALUE = "system"

TUNABLES: tuple[tuple[str, str], ...] = (
    ("glibc.malloc.mmap_max", "0"),  # no mmap per block: every block from a heap
    ("glibc.malloc.trim_threshold", str(1 << 40)),  # a heap's top is never given back
)


def applies(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process's C library reads the tunables (glibc 2.26 or newer on Linux)
    and the user has not opted out."""
    env = os.environ if env is None else env
    if env.get(OPT_OUT_ENV, "").strip().lower() == OPT_OUT_VALUE:
        return False
    if not sys.platform.startswith("linux"):
        return False
    library, version = platform.libc_ver()
    if library != "glibc":
        return False
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 26)


def tuned(value: str | None) -> str:
    """``GLIBC_TUNABLES``'s value with :data:`TUNABLES` added; a name already there keeps
    its value."""
    entries = [entry for entry in (value or "").split(":") if entry]
    named = {entry.partition("=")[0] for entry in entries}
    entries += [f"{name}={setting}" for name, setting in TUNABLES if name not in named]
    return ":".join(entries)


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the tunables in ``GLIBC_TUNABLES``, where they apply."""
    result = dict(env)
    if applies(env):
        result[ENV] = tuned(env.get(ENV))
    return result


def reexec_tuned() -> None:
    """Start this command again, same arguments and process id, with the tunables in its
    environment; returns at once where they are set already or do not apply. Call it first
    thing, before anything worth keeping is loaded."""
    if not applies() or tuned(os.environ.get(ENV)) == os.environ.get(ENV):
        return
    argv = list(getattr(sys, "orig_argv", ()) or [sys.executable, *sys.argv])
    env = environment(os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, env)
    except OSError:  # cannot start again: run as started, untuned
        return
