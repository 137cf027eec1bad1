"""The suite's memory, estimated before anything is built, and the refusal when it won't fit."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tools.correctness.footprint import available_bytes, fit_problem, peak_live_bytes
from tools.correctness.testsuite import SuiteTooLarge, build_suite
from tools.inputs.tasks import load_task

MIB = 1 << 20


def _peak(fn, *shapes) -> int:
    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    return peak_live_bytes(jax.make_jaxpr(fn)(*specs).jaxpr)


def test_liveness_fuses_elementwise_chains_and_counts_what_is_live_together() -> None:
    # mul -> tanh -> add: only the result is materialised (4 MiB)
    assert _peak(lambda a: jnp.tanh(a * 2.0) + 1.0, (1024, 1024)) == 4 * MIB
    # (a @ a) @ a: the first product is live while the second is written
    assert _peak(lambda a: (a @ a) @ a, (1024, 1024)) == 8 * MIB
    # a product read twice stays live until its last reader writes: p, its column sums and
    # the result (exp(p) itself fuses into the multiply)
    def twice(a):
        p = a @ a
        return jnp.exp(p) * p.sum(0)

    assert _peak(twice, (1024, 1024)) == 8 * MIB + 4096


def test_available_memory_is_read_from_the_process_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    # one snapshot of /proc/meminfo for both sides: the machine's free memory moves between
    # two reads while other work runs, and the test owns only what it compares
    from tools.correctness import footprint

    meminfo = Path("/proc/meminfo").read_text()
    real_read = footprint._read
    monkeypatch.setattr(footprint, "_read",
                        lambda path: meminfo if str(path) == "/proc/meminfo" else real_read(path))
    room, source = available_bytes()
    mem_available = int(re.search(r"MemAvailable:\s+(\d+)", meminfo).group(1)) * 1024
    assert 0 < room <= mem_available and source


JAXBENCH_MATMUL = """
import jax, jax.numpy as jnp
CONFIG = {'name': 'big_matmul', 'M': 4096, 'K': 2048, 'N': 4096}
def create_inputs(dtype=jnp.float32):
    k1, k2 = jax.random.split(jax.random.key(42))
    return (jax.random.normal(k1, (CONFIG['M'], CONFIG['K']), dtype),
            jax.random.normal(k2, (CONFIG['K'], CONFIG['N']), dtype))
def workload(a, b):
    return jnp.tanh(a @ b)
"""


def test_a_suite_that_does_not_fit_is_refused_with_a_scale_that_does(tmp_path: Path) -> None:
    path = tmp_path / "baseline.py"
    path.write_text(textwrap.dedent(JAXBENCH_MATMUL))
    task = load_task(path)
    counts = {0: 5, **{i: 1 for i in task.unseen_shape_indices}}
    room = (1536 * MIB, "a 1.5 GiB test limit")
    footprint, problem = fit_problem(task, counts, available=room)
    assert footprint.peak_bytes > 0.85 * 1536 * MIB  # 4096 x 4096 float64 oracle, its work
    assert problem is not None and "a 1.5 GiB test limit" in problem
    scales = [float(s) for s in re.search(r"--scale ([\d.,]+) would need", problem)
              .group(1).split(",")]
    smaller = load_task(path, scales=scales)
    counts = {0: 5, **{i: 1 for i in smaller.unseen_shape_indices}}
    assert fit_problem(smaller, counts, available=room)[1] is None  # the suggestion fits


def test_a_suite_larger_than_the_machine_is_refused_before_anything_is_built(
    tmp_path: Path,
) -> None:
    path = tmp_path / "huge.py"
    path.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        SHAPES = [(131072, 131072)]
        def reference(x):
            return jnp.tanh(x)
        def make_inputs(key, shape_index=0):
            return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
        """))
    with pytest.raises(SuiteTooLarge, match=r"needs about \d+\.\d+ GiB .* reduce the sizes in "
                                            r"its SHAPES"):
        build_suite(load_task(path))
