"""What this machine offers the sandbox, checked rather than assumed: the namespaces, the
uid drop, the control groups, a private /tmp, the TPU compiler, and whether candidate code
would run (``kernelgraph doctor``)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from typing import Any

from tools.sandbox import cgroups, namespaces, policy


def _unshare(*flags: str) -> bool:
    """Whether this process may create these namespaces (a no-op inside them)."""
    if not shutil.which(namespaces.UNSHARE):
        return False
    try:
        return subprocess.run([namespaces.UNSHARE, *flags, "--", "/bin/true"], cwd="/",
                              capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _tpu_compiler() -> str | None:
    """The installed libtpu's version (the ``jax[tpu]`` extra), or None."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def report() -> dict[str, Any]:
    """Every check, then the verdict: whether candidate code runs, and in what."""
    probe = namespaces.probe()
    controllers = {c for h in cgroups.hierarchies() for c in h.controllers}
    problem = policy.problem()
    allowed = policy.weak_allowed()
    checks = {
        "user_namespace": namespaces.user_namespace_available(),
        "mount_namespace": _unshare("--mount"),
        "pid_namespace": _unshare("--pid", "--fork"),
        "net_namespace": _unshare("--net"),
        "uid_drop": os.geteuid() == 0 and bool(shutil.which("setpriv")),
        "cgroup_memory": "memory" in controllers,
        "cgroup_pids": "pids" in controllers,
        "private_tmp": probe.works,
        "full_sandbox": not problem,
    }
    return {
        "checks": checks,
        "problem": problem,
        "fix": policy.how_to_fix(problem) if problem else "",
        "probe": probe.facts,
        "tpu_compiler": _tpu_compiler(),
        "weak_sandbox_allowed": allowed,
        "candidate_code_runs": "full sandbox" if not problem else (
            "weak sandbox (opted in)" if allowed else "no"),
    }
