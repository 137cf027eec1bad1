"""Tree limits (control groups): written where a hierarchy allows, joined before the command
runs, sealed from the child, emptied and removed afterwards, and never claimed where absent.

Quick and real: small shell and Python processes in real groups of this machine's cgroupfs.
The candidate-level checks (a forking build rejected in a full verification) are in
tests/test_verify.py.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tools.sandbox import cgroups, namespaces
from tools.sandbox import launcher as sandbox
from tools.sandbox.launcher import Limits, run_sandboxed


def _needs(*controllers: str) -> None:
    offered = {c for h in cgroups.hierarchies() for c in h.controllers}
    missing = set(controllers) - offered
    if missing:
        pytest.skip(f"no writable cgroup hierarchy with {sorted(missing)} here")


def _joined(group: cgroups.TreeGroup, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", sandbox._JOINER, "kg-join", *group.procs_files,
                           "--", *command], capture_output=True, text=True, timeout=60)


def test_a_group_caps_the_tasks_of_the_tree_and_close_leaves_nothing() -> None:
    _needs("pids")
    group = cgroups.create("test-tasks", memory_bytes=None, max_tasks=8)
    try:
        assert group.isolation == ["cgroup-pids"]
        assert [Path(p, "pids.max").read_text().strip() for p in group.paths] == ["8"]
        # The shell forks sleepers until refused; those it started outlive it, in the group.
        out = _joined(group, "/bin/sh", "-c",
                      "i=0; while [ $i -lt 20 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); done")
        assert out.returncode != 0 and "fork" in out.stderr.lower(), out
        assert group.task_limit_hits() >= 1
        left = group._members()
        assert 1 <= len(left) <= 8
    finally:
        group.close()
    assert not cgroups.leftover_groups()
    assert all(not Path(p).exists() for p in group.paths)
    for pid in left:  # killed (a zombie awaiting its reaper at most)
        status = Path(f"/proc/{pid}/stat")
        assert not status.exists() or status.read_text().split(")")[-1].split()[0] in "ZX"


def test_a_group_caps_the_memory_of_the_tree() -> None:
    _needs("memory")
    group = cgroups.create("test-memory", memory_bytes=96 << 20, max_tasks=None)
    try:
        assert group.isolation == ["cgroup-memory"]
        out = _joined(group, sys.executable, "-c", "b = b'1' * (300 << 20); print('kept')")
        assert out.returncode == -9 and "kept" not in out.stdout, out
        assert group.oom_kills() >= 1
        assert group.peaks()["memory_bytes"] <= 96 << 20
    finally:
        group.close()
    assert not cgroups.leftover_groups()


def test_nothing_is_limited_or_claimed_without_limits() -> None:
    group = cgroups.create("test-none", memory_bytes=None, max_tasks=None)
    assert group.dirs == [] and group.isolation == [] and group.procs_files == []


def test_the_launcher_joins_the_group_and_seals_cgroupfs_from_the_child() -> None:
    _needs("pids")
    if not sandbox.namespaces_available():
        pytest.skip("no namespaces here")
    group = cgroups.create("test-seal", memory_bytes=None, max_tasks=64)
    box = tempfile.mkdtemp(prefix="kg-test-")
    try:
        limit_file = Path(group.paths[0], "pids.max")
        script = f'cat /proc/self/cgroup; echo max > {limit_file} && echo RAISED'
        out = subprocess.run([*namespaces.prefix(box, group.procs_files),
                              "/bin/sh", "-c", script], capture_output=True, text=True,
                             timeout=60)
        name = Path(group.paths[0]).name
        assert f"/{cgroups.PARENT}/{name}\n" in out.stdout, out  # joined before the command
        assert "RAISED" not in out.stdout and "Read-only" in out.stderr, out
        assert limit_file.read_text().strip() == "64"
    finally:
        group.close()
        os.rmdir(box)
    assert not cgroups.leftover_groups()


@pytest.mark.parametrize("with_cgroups", [True, False])
def test_the_sandbox_claims_tree_limits_only_where_applied(monkeypatch, with_cgroups: bool):
    if with_cgroups:
        _needs("memory", "pids")
    else:
        monkeypatch.setattr(cgroups, "hierarchies", lambda: [])
    out = run_sandboxed("this", b"", limits=Limits(wall_s=60.0))  # prints a poem, exits 0
    assert out.returncode == 0 and "Beautiful is better than ugly" in out.stdout_tail, out
    claimed = {"cgroup-memory", "cgroup-pids"} & set(out.isolation)
    assert claimed == ({"cgroup-memory", "cgroup-pids"} if with_cgroups else set())
    assert bool(out.groups) == with_cgroups
    assert all(not Path(p).exists() for p in out.groups)
    if with_cgroups:
        assert 1 <= out.tree_peak["tasks"] <= out.limits.max_tasks


def test_tree_memory_defaults_to_the_process_limit_and_infinity_means_none() -> None:
    assert Limits(memory_bytes=3 << 30).tree_memory_bytes == 3 << 30
    assert Limits(memory_bytes=3 << 30, total_memory_bytes=1 << 30).tree_memory_bytes == 1 << 30
    assert Limits(memory_bytes=resource.RLIM_INFINITY).tree_memory_bytes is None
    described = Limits(max_tasks=100).describe()
    assert described["max_tasks"] == 100 and described["total_memory_bytes"] == 4 << 30
    assert Limits().max_tasks >= 512
