"""JAX's persistent compilation cache in the trusted processes (tools/compilecache.py): a
second process loads what the first compiled, the cache can be turned off, and it is one
folder per host CPU and jaxlib. That sandboxed children never see it is checked end to end
in tests/test_verify.py (a candidate hunts for it) and tests/test_tasks.py (the child's
environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import compilecache

# Compiles one program twice in a fresh process and reports JAX's cache hits.
_PROBE = """
import json, sys
from tools import compilecache
folder = compilecache.enable()
import jax
hits = []
jax.monitoring.register_event_listener(
    lambda event, **_: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
jax.jit(lambda x: x * 2.0 + 1.0)(jax.numpy.arange(11.0)).block_until_ready()
print(json.dumps({"folder": str(folder) if folder else None, "hits": len(hits),
                  "dir": jax.config.jax_compilation_cache_dir}))
"""


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE], env={**os.environ, **env,
                          "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _no_jax_cache_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes start from an environment without JAX cache settings (the test session's
    own cache may have put them there)."""
    for name in compilecache.JAX_CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_second_process_loads_what_the_first_compiled(tmp_path: Path) -> None:
    env = {compilecache.CACHE_ENV: str(tmp_path / "xla")}
    first, second = _probe(env), _probe(env)
    folder = Path(first["folder"])
    assert folder.parent == tmp_path / "xla" and first["dir"] == str(folder)
    assert first["hits"] == 0 and second["hits"] >= 1
    assert folder.stat().st_mode & 0o077 == 0  # this user's alone
    assert folder.name == compilecache.host_key() and "jaxlib" in folder.name


def test_off_compiles_everything_and_writes_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for value in ("off", "0"):
        found = _probe({compilecache.CACHE_ENV: value})
        assert found == {"folder": None, "hits": 0, "dir": None}
    assert not (tmp_path / ".cache").exists()


def test_a_users_own_jax_cache_setting_is_kept(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "users"))
    found = _probe({compilecache.CACHE_ENV: str(tmp_path / "xla")})
    assert found["dir"] == found["folder"] == str(tmp_path / "users")
    assert not (tmp_path / "xla").exists()


def test_an_unwritable_place_means_no_cache_not_an_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    found = _probe({compilecache.CACHE_ENV: str(blocked / "xla")})
    assert found["folder"] is None and found["hits"] == 0
