"""Whether candidate code may run here: in the full sandbox, or not at all unless the user
opted in to a weaker one.

The full sandbox is the namespace launcher's (:mod:`tools.sandbox.namespaces`): its own PID,
mount, network and IPC namespaces, uid 65534 without capabilities, every filesystem but its
folder read-only and a private /tmp holding that folder alone. A verifier that ran
untrusted code with its own rights whenever that could not be built would be open whatever
it recorded, so :func:`require` refuses instead, with one line saying what failed and how
to fix it. ``--allow-weak-sandbox`` (or ``KG_ALLOW_WEAK_SANDBOX=1``) runs anyway; the
weaker sandbox is then named in every verdict, receipt, run event and report.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kernelgraph.errors import KernelgraphError
from tools.sandbox import namespaces

ALLOW_ENV = "KG_ALLOW_WEAK_SANDBOX"
ALLOW_FLAG = "--allow-weak-sandbox"
WEAK_LABEL = "weak-sandbox-allowed"  # in SandboxResult.isolation when the opt-in ran it
_TRUE = {"1", "true", "yes", "on"}


class SandboxUnavailable(KernelgraphError, RuntimeError):
    """The full sandbox cannot be built here and nobody opted in to a weaker one."""


def weak_allowed() -> bool:
    """Whether the user opted in to running candidates without the full sandbox."""
    return os.environ.get(ALLOW_ENV, "").strip().lower() in _TRUE


def allow_weak() -> None:
    """Opt in for this process and everything it starts (the CLI flag)."""
    os.environ[ALLOW_ENV] = "1"


def problem(devices: Sequence[str] = ()) -> str:
    """Why the full sandbox cannot be built here ("" when it can), in one clause."""
    if os.name != "posix" or os.geteuid() != 0:
        return ("the sandbox runs candidates as uid 65534 in namespaces of their own, which "
                "needs the verifier to run as root")
    probe = namespaces.probe()
    if not probe.works:
        return f"the namespace sandbox failed its probe: {probe.problem}"
    unusable = [node for node, gid in namespaces._device_access(devices) if gid is None]
    if unusable:
        return (f"the accelerator's device nodes are usable by root only ({', '.join(unusable)}),"
                " so its timing child would keep uid 0")
    return ""


def how_to_fix(reason: str) -> str:
    if "needs the verifier to run as root" in reason:
        return "run kernelgraph as root (a container's root will do)"
    if "not found" in reason:
        return "install util-linux (unshare, setpriv, mount)"
    if "not permitted" in reason.lower() or "permission denied" in reason.lower():
        return ("allow namespaces and mounts (in a container: --privileged, or --cap-add "
                "SYS_ADMIN with seccomp and AppArmor unconfined)")
    if "usable by root only" in reason:
        return "give the device nodes a group of their own with read and write (chgrp, chmod g+rw)"
    return "see `kernelgraph doctor`"


def refusal(reason: str) -> str:
    """The one line a command prints when it refuses to run candidate code."""
    return (f"no candidate code runs here: {reason}. Fix: {how_to_fix(reason)}; or pass "
            f"{ALLOW_FLAG} (or set {ALLOW_ENV}=1) to run candidates in a weaker sandbox, which "
            "every verdict then records (`kernelgraph doctor` shows what this machine offers)")


def require(devices: Sequence[str] = ()) -> bool:
    """True where the full sandbox is available; False where it is not but the user opted
    in; else :class:`SandboxUnavailable` with the one line to print."""
    reason = problem(devices)
    if not reason:
        return True
    if weak_allowed():
        return False
    raise SandboxUnavailable(refusal(reason))


# The agents that run candidate code (or a program traced from it) in a sandboxed child.
CANDIDATE_AGENTS = frozenset({"auditor", "autotuner", "baseline", "executor", "profiler",
                              "verifier"})


def weak_in_effect() -> bool:
    """Whether candidates started by this process run in the weaker sandbox (opted in, and
    the full one cannot be built); probes only when the user opted in."""
    return weak_allowed() and bool(problem())
