"""Boxes and groups whose launcher was killed are swept; a live launcher's never are.

Real processes: a launcher here is a Python child that makes a box (and a control group where
this machine offers one), then is SIGKILLed, as the OOM killer or a timeout would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tools.sandbox import boxes, cgroups

_LAUNCHER = """
import sys, tempfile, time
tempfile.tempdir = sys.argv[1]
from tools.sandbox import boxes, cgroups
box = boxes.make_box()
(box.path / "request.bin").write_bytes(b"x" * 1_000_000)
group = cgroups.create(box.path.name, memory_bytes=None, max_tasks=64)
print(box.path, *group.paths, flush=True)
time.sleep(600)
"""


def _launcher(folder: Path) -> tuple[subprocess.Popen[str], Path, list[str]]:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(folder)], cwd=root,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout is not None
    box, *groups = proc.stdout.readline().split()
    return proc, Path(box), groups


def test_a_killed_launchers_box_and_group_are_swept_and_a_live_ones_are_kept(
        tmp_path: Path) -> None:
    live, live_box, live_groups = _launcher(tmp_path)
    killed, dead_box, dead_groups = _launcher(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert dead_box.exists() and all(Path(g).exists() for g in dead_groups)

        # Too young to judge: a box made a moment ago may not be locked yet.
        assert str(dead_box) not in boxes.sweep(tmp_path)
        assert dead_box.exists()

        removed = boxes.sweep(tmp_path, min_age_s=0)
        assert {*dead_groups, str(dead_box)} <= set(removed)
        assert not {*live_groups, str(live_box)} & set(removed)
        assert not dead_box.exists() and not any(Path(g).exists() for g in dead_groups)
        assert live_box.exists() and (live_box / "request.bin").exists()
        assert all(Path(g).exists() for g in live_groups)
    finally:
        live.kill()
        live.wait(timeout=30)
    # Its launcher gone, the other box goes the same way.
    assert str(live_box) in boxes.sweep(tmp_path, min_age_s=0)
    assert not live_box.exists()
    assert not cgroups.leftover_groups(live.pid) and not cgroups.leftover_groups(killed.pid)


def test_a_box_held_by_this_process_is_kept_and_anything_else_is_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    held = boxes.make_box()
    assert held.path.parent == tmp_path
    try:
        old = time.time() - 3600
        os.utime(held.path, (old, old))
        assert not boxes.abandoned(held.path, min_age_s=0)
        assert str(held.path) not in boxes.sweep(held.path.parent, min_age_s=0)
        assert held.path.exists()
    finally:
        held.remove()
    assert not held.path.exists()

    other = tmp_path / "not-a-box"
    other.mkdir()
    link = tmp_path / f"{boxes.PREFIX}link"
    link.symlink_to(other)
    older_version = tmp_path / "kg-sandbox-unlocked"  # an older launcher's: it holds no lock
    older_version.mkdir()
    os.utime(older_version, (old, old))
    removed = set(boxes.sweep(tmp_path, min_age_s=0))
    assert not {str(link), str(other), str(older_version)} & removed
    assert other.exists() and link.is_symlink() and older_version.exists()


def test_the_sweep_runs_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    monkeypatch.setattr(boxes, "_swept", False)
    monkeypatch.setattr(boxes, "sweep", lambda *a, **k: calls.append(None) or [])
    boxes.sweep_once()
    boxes.sweep_once()
    assert len(calls) == 1
