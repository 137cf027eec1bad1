"""Suite seeds folded into a JAXBench file's fixed PRNG keys, for that file and thread only.

The file's `jax.random.PRNGKey(42)` becomes a different key per suite seed, so the suite's
seeds draw different inputs; seed 0 keeps the file's own inputs. Folding once patched
`jax.random` for the whole process, so a seed-0 build on another thread (a determinism
check, another run's input maker) drew the folded keys while a seed-1 build was under way.
"""

from __future__ import annotations

import threading
from pathlib import Path

import jax
import numpy as np
import pytest

from tools.inputs.tasks import load_task

IMPORTS = {
    "module": ("import jax\nimport jax.numpy as jnp\n", "jax.random.PRNGKey", "jax.random"),
    "random": ("from jax import random\nimport jax.numpy as jnp\n", "random.PRNGKey", "random"),
    "by name": ("from jax.random import key, normal\nimport jax.numpy as jnp\n", "key", ""),
}

TASK = '''{imports}import threading

CONFIG = {{"name": "gated", "rows": 64, "cols": 128}}
GATE = threading.Event()
ENTERED = threading.Event()


def create_inputs(dtype=jnp.float32):
    first = {maker}(42)
    if GATE_ON[0]:
        ENTERED.set()
        GATE.wait(10)
    second = {maker}(42)
    return ({random}normal(first, (CONFIG["rows"], CONFIG["cols"]), dtype=dtype),
            {random}normal(second, (CONFIG["rows"], CONFIG["cols"]), dtype=dtype))


GATE_ON = [False]


def workload(x, y):
    return x * 2.0 + y
'''


def _task(tmp_path: Path, style: str):
    imports, maker, random = IMPORTS[style]
    path = tmp_path / "baseline.py"
    path.write_text(TASK.format(imports=imports, maker=maker,
                                random=f"{random}." if random else ""))
    return load_task(path)


@pytest.mark.parametrize("style", sorted(IMPORTS))
def test_seed_zero_is_the_files_own_and_other_seeds_differ(tmp_path: Path, style: str) -> None:
    task = _task(tmp_path, style)
    own = jax.random.normal(jax.random.PRNGKey(42), (64, 128))
    zero, one = task.make_inputs(0), task.make_inputs(1)
    np.testing.assert_array_equal(np.asarray(zero[0]), np.asarray(own))
    assert not np.array_equal(np.asarray(one[0]), np.asarray(own))
    np.testing.assert_array_equal(np.asarray(task.make_inputs(1)[0]), np.asarray(one[0]))


@pytest.mark.parametrize("style", sorted(IMPORTS))
def test_folding_on_one_thread_reaches_no_other(tmp_path: Path, style: str) -> None:
    task = _task(tmp_path, style)
    own = task.make_inputs(0)
    originals = (jax.random.PRNGKey, jax.random.key)
    module = task.module
    module.GATE_ON[0] = True
    built: dict[str, tuple[object, ...]] = {}
    seed_one = threading.Thread(target=lambda: built.setdefault("one", task.make_inputs(1)))
    seed_one.start()
    try:
        assert module.ENTERED.wait(10)  # seed 1 is being built, between its two keys
        module.GATE_ON[0] = False
        assert (jax.random.PRNGKey, jax.random.key) == originals
        elsewhere = jax.random.normal(jax.random.PRNGKey(42), (64, 128))
        again = task.make_inputs(0)
    finally:
        module.GATE.set()
        seed_one.join(10)
    np.testing.assert_array_equal(np.asarray(elsewhere), np.asarray(own[0]))
    for mine, theirs in zip(again, own, strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    first, second = built["one"]
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))  # folded throughout
    assert not np.array_equal(np.asarray(first), np.asarray(own[0]))
