"""Suites that do not live in memory: large arrays memory-mapped from disk as each case is
built, the sha256 streamed piece by piece and equal to the in-memory suite's."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import numpy as np
import pytest

from tools.correctness.store import is_mapped, spill, stream_sha256
from tools.correctness.testsuite import FrozenSuite, build_suite
from tools.inputs.tasks import load_task
from tools.sandbox.wire import WireArray

ROOT = Path(__file__).resolve().parent.parent
ENCODER = msgspec.msgpack.Encoder(order="sorted")


def test_the_streamed_hash_is_the_hash_of_msgspecs_encoding(tmp_path: Path) -> None:
    class Doc(msgspec.Struct, frozen=True):
        arrays: tuple[WireArray, ...]
        name: str
        sizes: dict[str, float]
        shapes: tuple[tuple[int, ...], ...]

    mapped = spill(np.arange(100_000, dtype=np.float64), tmp_path, spill_bytes=1)
    assert is_mapped(mapped) and not list(tmp_path.iterdir())  # unlinked once mapped
    for n in (0, 15, 16, 300, 70_000):  # every msgpack header width
        small = WireArray.of(np.ones(n, np.uint8))
        doc = Doc((mapped, small) * (n % 3 + 1), "x" * n, {"b": 1.0, "a": -2.0},
                  tuple((i, -i) for i in range(n % 20)))
        assert stream_sha256(doc) == hashlib.sha256(ENCODER.encode(doc)).hexdigest()


SMALL = """
import jax, jax.numpy as jnp
SHAPES = [(40, 200)]
def reference(x, w):
    return jnp.tanh(x) * w
def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    return jax.random.normal(kx, SHAPES[0], jnp.float32), jax.random.normal(kw, (200,))
"""


def test_a_spilled_suite_has_the_in_memory_suites_hash_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "small.py"
    path.write_text(textwrap.dedent(SMALL))
    task = load_task(path)
    store = tmp_path / "store"
    store.mkdir()
    in_memory = build_suite(task, seeds=(0, 1), spill_bytes=None)
    spilled = build_suite(task, seeds=(0, 1), spill_bytes=0, directory=store)
    arrays = [a for c in spilled.cases for a in (*c.inputs, *c.oracle) if a.shape]
    assert arrays and all(is_mapped(a) for a in arrays)
    assert not any(is_mapped(a) for c in in_memory.cases for a in (*c.inputs, *c.oracle))
    assert not list(store.iterdir())  # nothing is left behind on disk
    assert spilled.sha256 == in_memory.sha256
    assert FrozenSuite.from_bytes(spilled.to_bytes()).sha256 == spilled.sha256
    first = spilled.cases[0].oracle[0].numpy()
    assert np.array_equal(first, in_memory.cases[0].oracle[0].numpy())


_PEAK = """
import json, os, resource, sys, threading, time
from tools.correctness import testsuite
from tools.correctness.footprint import suite_footprint
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task

testsuite.REPEAT_LIMIT_BYTES = 1 << 40  # every seed and probe at the 16 MiB tuning point

PAGE = os.sysconf("SC_PAGE_SIZE")

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE

def max_rss():  # some kernels (gVisor) report 0 here, so the sampled RSS is kept beside it
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

task = load_task(sys.argv[1])
spill = None if sys.argv[2] == "memory" else 0
counts = {0: 2 + 2, **{i: 1 for i in task.unseen_shape_indices}}
estimate = suite_footprint(task, counts, held_per_case=spill is None).peak_bytes
peak, done = [rss()], threading.Event()

def sample():
    while not done.is_set():
        peak.append(max(peak.pop(), rss()))
        time.sleep(0.001)

sampler = threading.Thread(target=sample, daemon=True)
before_rss, before_max = rss(), max_rss()
sampler.start()
suite = build_suite(task, seeds=(0, 1), spill_bytes=spill, directory=None)
done.set()
sampler.join()
growth = max(peak[0] - before_rss, max_rss() - before_max)
print(json.dumps({"growth": growth, "estimate": estimate}))
"""

BIG = """
import jax, jax.numpy as jnp
SHAPES = [(1024, 4096), (768, 4096)]
def reference(x, w):
    return jnp.tanh(x * w) + x
def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, SHAPES[shape_index], jnp.float32),
            jax.random.normal(kw, SHAPES[shape_index][-1:], jnp.float32))
"""


@pytest.mark.slow
def test_spilling_keeps_the_peak_near_one_case_and_within_the_estimate(tmp_path: Path) -> None:
    path = tmp_path / "big.py"
    path.write_text(textwrap.dedent(BIG))
    runs = {}
    for mode in ("memory", "disk"):
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path), mode], cwd=ROOT,
                             capture_output=True, text=True, timeout=600, check=True,
                             env={"KERNELGRAPH_SUITE_DIR": str(tmp_path), "PATH": "/usr/bin",
                                  "JAX_PLATFORMS": "cpu"})
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    # six cases of 16 MiB inputs and 32 MiB float64 oracles: in memory they add up
    assert runs["memory"]["growth"] > 150 * (1 << 20), runs  # the measurement itself works
    assert runs["disk"]["growth"] < runs["memory"]["growth"] - 100 * (1 << 20)
    assert runs["disk"]["growth"] <= runs["disk"]["estimate"]
    assert runs["memory"]["growth"] <= runs["memory"]["estimate"]


def test_output_statistics_in_chunks_are_the_whole_array_statistics(monkeypatch) -> None:
    from tools.correctness import floors
    from tools.inputs.dtypes import DEFAULT_TOLERANCE

    rng = np.random.default_rng(0)
    oracle = rng.standard_normal((300, 100)) * 100
    oracle[5, 5] = np.inf
    ref = (oracle + rng.standard_normal(oracle.shape) * 1e-3).astype(np.float32)
    magnitude = np.abs(np.where(np.isfinite(oracle), oracle, 0)) * 1e3  # slack is needed
    whole = floors.output_stats(ref, oracle, magnitude, DEFAULT_TOLERANCE)
    monkeypatch.setattr(floors, "CHUNK", 1000)  # 30 chunks
    chunked = floors.output_stats(ref, oracle, magnitude, DEFAULT_TOLERANCE)
    assert whole.slack is not None and np.array_equal(whole.slack, chunked.slack)
    for name in ("oracle_finite", "reference_finite", "floor_max_abs", "ceiling_applies",
                 "terms_max_abs"):
        assert getattr(whole, name) == getattr(chunked, name), name
    for name in ("floor_mean_abs", "terms_mean_abs"):  # sums in another order
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-12)
    summed = [np.where(np.isfinite(oracle), -2 * oracle, np.nan)]
    monkeypatch.setattr(floors, "CHUNK", 1 << 23)
    one = floors.term_magnitudes(summed, [oracle])[0]
    monkeypatch.setattr(floors, "CHUNK", 1000)
    assert np.array_equal(one, floors.term_magnitudes(summed, [oracle])[0])
    assert np.array_equal(one, np.maximum(np.nan_to_num(np.abs(summed[0]), nan=0.0,
                                                        posinf=0.0), np.abs(oracle)))
