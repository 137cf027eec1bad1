"""A refused task, as a user meets it on `search`, `bench` and `verify`: said once, on stderr,
naming the task as the user gave it (the JAXBench folder), never a copy in a cache or a
Python class path, and the command exits non-zero.

The task is a JAXBench-style folder written here whose full-size suite needs terabytes:
the memory estimate refuses it in seconds, before anything runs at that size.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgraph.userterms import in_user_terms, label_of, remember

HUGE = '''
import jax
import jax.numpy as jnp

CONFIG = {"name": "huge_scale", "batch": 64, "seq_len": 65536, "emb_dim": 65536}


def create_inputs(dtype=jnp.float32):
    key = jax.random.key(0)
    shape = (CONFIG["batch"], CONFIG["seq_len"], CONFIG["emb_dim"])
    return (jax.random.normal(key, shape, dtype=dtype),)


def workload(x):
    return x * 2.0
'''

CANDIDATE = '''
def build(**knobs):
    return lambda x: x * 2.0
'''

REFUSAL = "freezing the suite needs about"


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "jaxbench" / "benchmark" / "9x_Huge_Scale"
    folder.mkdir(parents=True)
    (folder / "baseline.py").write_text(HUGE)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "KG_WORKSPACE": str(tmp_path / "work"), "TMPDIR": str(tmp),
           "KG_KNOWLEDGE_PATH": str(tmp_path / "knowledge")}
    return folder, env


def kg(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelgraph", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def said_once_in_user_terms(done: subprocess.CompletedProcess[str], folder: Path,
                            env: dict[str, str]) -> None:
    err = done.stderr
    assert done.returncode != 0, err[-2000:]
    assert err.count(REFUSAL) == 1, err[-4000:]
    line = next(line for line in err.splitlines() if REFUSAL in line)
    assert f"{folder}: {REFUSAL}" in line, line  # the folder the user gave, not its baseline.py
    assert "--scale" in line  # the scale that fits, not cut off
    for leak in (env["KG_WORKSPACE"], "kernelgraph-scaled-", "bus.service.", "PermanentError", "SuiteTooLarge",
                 "Traceback"):
        assert leak not in err, (leak, err[-4000:])
    assert not re.search(r"/tasks/[0-9a-f]{64}/", err), err[-4000:]
    assert REFUSAL not in done.stdout, done.stdout  # said once: not again on stdout


@pytest.mark.timeout(300)
def test_search_refusal_is_said_once_naming_the_folder(setup: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    folder, env = setup
    done = kg("search", str(folder), "--iterations", "1", "--db", str(tmp_path / "s.duckdb"),
              env=env)
    said_once_in_user_terms(done, folder, env)


@pytest.mark.timeout(300)
def test_bench_refusal_is_said_once_naming_the_folder(setup: tuple[Path, dict[str, str]],
                                                      tmp_path: Path) -> None:
    folder, env = setup
    done = kg("bench", str(folder), "--policy", "auto", "--iterations", "1", "--db",
              str(tmp_path / "b.duckdb"), env=env)
    said_once_in_user_terms(done, folder, env)
    assert "1 task(s) found, 1 loaded, 0 froze a suite" in done.stdout  # the folder is one task


@pytest.mark.timeout(300)
def test_verify_refusal_at_a_scale_names_the_folder_not_the_scaled_copy(
        setup: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    folder, env = setup
    candidate = tmp_path / "candidate.py"
    candidate.write_text(CANDIDATE)
    done = kg("verify", str(folder), str(candidate), "--scale", "0.5", env=env)
    said_once_in_user_terms(done, folder, env)


def test_in_user_terms_names_copies_as_given() -> None:
    given = "../accelerator-agents/JAXBench/benchmark/1p_Flash_Attention"
    remember(Path(given) / "baseline.py", label_of(Path(given) / "baseline.py"))
    copy = f"/root/.cache/kernelgraph/work/tasks/{'ab' * 32}/baseline.py"
    scaled = f"/tmp/kernelgraph-scaled-0/{'c' * 16}/1p_Flash_Attention/baseline.py"
    text = (f"bus.service.PermanentError: SuiteTooLarge: {copy}: too big; "
            f"{scaled}: also; tools.sandbox.launcher.SomeError: x")
    assert in_user_terms(text) == f"{given}: too big; {given}: also; SomeError: x"
    # kernelgraph's own errors are sentences: no class name; another's names what raised
    assert in_user_terms(f"TaskError: {copy}: making inputs raised ValueError: bad") == (
        f"{given}: making inputs raised ValueError: bad")
