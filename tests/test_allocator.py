"""The command's process runs with glibc's malloc tuned to reuse freed memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import allocator

ROOT = Path(__file__).resolve().parents[1]

needs_glibc = pytest.mark.skipif(not allocator.applies({}), reason="glibc's tunables only")

# Starts, asks to be tuned, then allocates, frees and allocates again 256 MiB, and says how
# many pages the second allocation faulted in.
_PROBE = textwrap.dedent("""
    import os, resource, sys
    print("started", os.getpid(), flush=True)
    from tools import allocator
    allocator.reexec_tuned()
    block = bytearray(1 << 28)
    del block
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(1 << 28)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print("tuned", os.getpid(), os.environ.get("GLIBC_TUNABLES"), faults, flush=True)
""")


def _probe(**env: str) -> tuple[list[str], list[str]]:
    clean = {k: v for k, v in os.environ.items()
             if k not in (allocator.ENV, allocator.OPT_OUT_ENV)}
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    return [line for line in lines if line.startswith("started")], lines[-1].split()


def test_tuning_adds_the_tunables_and_keeps_the_users_own() -> None:
    assert allocator.tuned(None) == ":".join(f"{k}={v}" for k, v in allocator.TUNABLES)
    mine = allocator.tuned("glibc.malloc.mmap_max=8:glibc.rtld.nns=8")
    entries = mine.split(":")
    assert entries[:2] == ["glibc.malloc.mmap_max=8", "glibc.rtld.nns=8"]
    assert "glibc.malloc.mmap_max=0" not in entries
    assert f"glibc.malloc.trim_threshold={1 << 40}" in entries
    assert allocator.tuned(mine) == mine  # tuned once is tuned


def test_opting_out_and_other_c_libraries_leave_the_environment_alone() -> None:
    assert not allocator.applies({allocator.OPT_OUT_ENV: "System"})
    env = {"PATH": "/bin", allocator.OPT_OUT_ENV: "system"}
    assert allocator.environment(env) == env


@needs_glibc
def test_the_process_starts_again_once_tuned_and_reuses_freed_memory() -> None:
    started, (_, pid, tunables, faults) = _probe()
    assert [line.split()[1] for line in started] == [pid, pid]  # once more, same process
    assert tunables == allocator.tuned(None)
    assert int(faults) < 1000  # 65,536 pages when glibc unmaps the freed block


@needs_glibc
def test_without_the_tunables_freed_memory_is_faulted_in_again() -> None:
    """The measure above can fail: untuned, the same allocation faults every page in."""
    started, (_, pid, tunables, faults) = _probe(**{allocator.OPT_OUT_ENV: "system"})
    assert [line.split()[1] for line in started] == [pid]  # not started again
    assert tunables == "None"
    assert int(faults) > 30000


@needs_glibc
def test_the_users_own_tunable_wins() -> None:
    _, (_, _, tunables, faults) = _probe(**{allocator.ENV: "glibc.malloc.mmap_max=65536"})
    assert tunables.split(":")[0] == "glibc.malloc.mmap_max=65536"
    assert "glibc.malloc.mmap_max=0" not in tunables.split(":")
    assert int(faults) > 30000  # glibc's mmap per block, as the user asked


def test_the_sandboxed_children_get_no_tunables(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.sandbox.launcher import scrubbed_env

    monkeypatch.setenv(allocator.ENV, allocator.tuned(None))
    assert allocator.ENV not in scrubbed_env()


def test_the_command_line_is_entered_through_the_tuning_launcher() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kernelgraph"] == "kernelgraph.launch:main"
    assert "from kernelgraph.launch import main" in (ROOT / "kernelgraph/__main__.py").read_text()
