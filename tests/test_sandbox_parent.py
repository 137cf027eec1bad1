"""The sandbox cannot be used against the parent: output files are read only through the
parent's own descriptors (never a link followed or a FIFO waited on), and a sandboxed
candidate dies with a verifier that was killed.

Real sandboxed children; each test asserts on its own process tree and files only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.sandbox import wire
from tools.sandbox.launcher import Limits, read_regular_file, run_sandboxed
from tools.sandbox.policy import SandboxUnavailable

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = ROOT / "tests" / "candidates"
_EMPTY = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(), order_seed=0)


def _sandboxed(candidate: str, wall_s: float = 60.0):
    return run_sandboxed("tools.child.worker", wire.encode(_EMPTY),
                         files={"candidate.py": (CANDIDATES / candidate).read_bytes()},
                         limits=Limits(wall_s=wall_s))


def test_swapped_output_files_leak_nothing_and_hang_nothing(monkeypatch) -> None:
    secret = "kg-parent-secret-6f1d"
    monkeypatch.setenv("NATS_TOKEN", secret)
    started = time.monotonic()
    box = _sandboxed("swaps_output_files.py")
    assert time.monotonic() - started < 50  # no FIFO waited on
    assert box.returncode == 0 and box.result is None and not box.ok
    assert "no result" in box.failure()
    assert secret not in box.stderr_tail + box.stdout_tail
    assert "NATS_TOKEN" not in box.stderr_tail


def test_only_plain_files_are_read(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"data")
    os.symlink("/proc/self/environ", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    os.link(tmp_path / "plain", tmp_path / "hardlink")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "solo").write_bytes(b"solo")
    assert read_regular_file(tmp_path / "solo", 100) == b"solo"
    assert read_regular_file(tmp_path / "big", 99) is None
    for name in ("link", "fifo", "plain", "missing"):
        assert read_regular_file(tmp_path / name, 100) is None, name


_VERIFIER = """
import sys
from pathlib import Path
from tools.sandbox import wire
from tools.sandbox.launcher import Limits, run_sandboxed
request = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(), order_seed=0)
run_sandboxed("tools.child.worker", wire.encode(request),
              files={"candidate.py": Path(sys.argv[1]).read_bytes()}, limits=Limits(wall_s=600))
"""


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            found.add(pid)
            stack.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signals are Linux's")
def test_a_sandboxed_candidate_dies_with_its_killed_verifier() -> None:
    verifier = subprocess.Popen([sys.executable, "-c", _VERIFIER,
                                 str(CANDIDATES / "never_returns.py")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        tree: set[int] = set()
        while time.monotonic() < deadline:  # the worker runs build() once it is there
            tree = _descendants(verifier.pid)
            if any(b"tools.child.worker" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in tree if _alive(p)):
                break
            time.sleep(0.2)
        assert tree, "the sandbox never started"
        time.sleep(1.0)
        tree = _descendants(verifier.pid)
        verifier.send_signal(signal.SIGKILL)
        verifier.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], "the sandbox outlived its verifier"
    finally:
        if verifier.poll() is None:
            verifier.kill()
            verifier.wait()


def test_the_child_leaves_nothing_behind_and_runs_unprivileged() -> None:
    """Private /dev, read-only /sys and /proc/sys, an unprivileged uid (where namespaces and
    root allow them; otherwise the isolation list must not claim them)."""
    marker = Path("/dev/kg-left-behind-before")
    box = _sandboxed("leaves_state_behind.py")
    assert box.ok, box.failure()
    response = wire.decode(box.result, wire.EvalResponse)
    assert "sandbox report:" in response.load_error, response.load_error
    if "private-dev" not in box.isolation:
        pytest.skip("no namespace sandbox on this host")
    assert "wrote=nothing" in response.load_error, response.load_error
    assert not marker.exists() and not Path("/dev/kg-left-behind").exists()
    assert "read-only-sys" in box.isolation
    if os.geteuid() == 0:
        assert "uid-65534" in box.isolation and "uid=65534" in response.load_error


_DEVICE_REPORT = b"""
import os
raise RuntimeError(f"devices: ptmx={os.path.exists('/dev/ptmx')} uid={os.getuid()}")
"""


@pytest.mark.parametrize(("device", "drops_uid"), [("/dev/ptmx", True), ("/dev/hwrng", False)])
def test_devices_a_timing_child_needs_are_passed_through(device: str, drops_uid: bool,
                                                         monkeypatch) -> None:
    """An accelerator's nodes appear in the private /dev; a node others cannot use would keep
    the child at uid 0 (without capabilities): not the full sandbox, so it runs only with the
    user's opt-in, and the isolation list then does not claim 65534 but names the opt-in."""
    if not Path(device).exists():
        pytest.skip(f"{device} is absent here")
    if not drops_uid and os.geteuid() == 0:
        with pytest.raises(SandboxUnavailable, match="usable by root only"):
            run_sandboxed("tools.child.worker", wire.encode(_EMPTY),
                          files={"candidate.py": _DEVICE_REPORT}, devices=[device])
        monkeypatch.setenv("KG_ALLOW_WEAK_SANDBOX", "1")
    box = run_sandboxed("tools.child.worker", wire.encode(_EMPTY),
                        files={"candidate.py": _DEVICE_REPORT}, limits=Limits(wall_s=60.0),
                        devices=[device])
    assert box.ok, box.failure()
    if "private-dev" not in box.isolation:
        pytest.skip("no namespace sandbox on this host")
    error = wire.decode(box.result, wire.EvalResponse).load_error
    if device == "/dev/ptmx":
        assert "ptmx=True" in error, error
    if os.geteuid() == 0:
        assert ("uid-65534" in box.isolation) == drops_uid
        assert ("weak-sandbox-allowed" in box.isolation) == (not drops_uid)
        assert (f"uid={65534 if drops_uid else 0}") in error, error


def test_the_sandbox_reports_its_trees_cpu_seconds_when_it_exits() -> None:
    done = run_sandboxed("this", b"", limits=Limits(wall_s=60.0))  # prints a poem, exits 0
    assert done.returncode == 0 and done.cpu_s is not None and 0 < done.cpu_s < 60
    # a runner waits for a request that never comes: killed at its limit, no figure
    killed = run_sandboxed("tools.child.runner", None, limits=Limits(wall_s=1.0))
    assert killed.timed_out and killed.cpu_s is None
