"""Loading a task checks it by abstract evaluation: no input is made and the reference
never runs, so a production-size task loads in seconds; the suite makes each input once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import TaskError, load_task

COUNTING = """
import jax, jax.numpy as jnp
COUNTS = {"inputs": 0, "reference": 0}
SHAPES = [SIZE, (64, 256)]
def _concrete(x):
    return not isinstance(x, jax.core.Tracer)
def reference(x, w):
    if _concrete(x):
        COUNTS["reference"] += 1
    return jnp.tanh(x) * w
def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, SHAPES[shape_index], jnp.float32)
    if _concrete(x):
        COUNTS["inputs"] += 1
    return x, jax.random.normal(kw, SHAPES[shape_index][-1:], jnp.float32)
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_production_size_task_loads_without_making_inputs_or_running_it(
    tmp_path: Path,
) -> None:
    # 64 Gi elements (256 GiB of float32): only abstract evaluation can load this
    task = load_task(_write(tmp_path, "huge", COUNTING.replace("SIZE", "(262144, 262144)")))
    assert task.module.COUNTS == {"inputs": 0, "reference": 0}
    x, w = task.input_specs(0)
    assert (x.shape, str(x.dtype), w.shape) == ((262144, 262144), "float32", (262144,))
    assert task.derived_shapes  # the unaligned shape was derived abstractly too
    assert task.module.COUNTS == {"inputs": 0, "reference": 0}


def test_the_suite_makes_each_input_once_and_runs_the_reference_jitted(tmp_path: Path) -> None:
    task = load_task(_write(tmp_path, "small", COUNTING.replace("SIZE", "(32, 128)")))
    suite = build_suite(task, seeds=(0, 1), probes=False)
    # two seeds, one declared shape, three derived (each size alone off the tile, then
    # both) and the non-finite case (its own inputs, with NaN and inf planted)
    made = len(suite.cases)
    counts = dict(task.module.COUNTS)
    assert made == 7 and counts == {"inputs": made, "reference": 0}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # a reference that works eagerly but not under jit: said before any suite is built
        ("def reference(x):\n    return x * 2 if float(x.sum()) > -1e9 else x\n",
         "runs eagerly but cannot be traced with jax.jit"),
        ("def reference(x):\n    raise ValueError('bad shapes')\n", "reference raised ValueError"),
    ],
)
def test_references_that_cannot_be_traced_say_why(tmp_path: Path, body: str,
                                                   expected: str) -> None:
    text = ("import jax, jax.numpy as jnp\n" + body
            + "def make_inputs(key, shape_index=0):\n"
              "    return (jax.random.normal(key, (16, 128)),)\n")
    with pytest.raises(TaskError, match=expected):
        load_task(_write(tmp_path, "untraceable", text))


def test_an_input_maker_that_cannot_be_traced_is_run_and_still_checked(tmp_path: Path) -> None:
    numpy_maker = ("import jax, jax.numpy as jnp, numpy as np\n"
                   "def reference(x):\n    return x * 2\n"
                   "def make_inputs(key, shape_index=0):\n"
                   "    seed = int(np.asarray(jax.random.key_data(key)).sum())  # concrete\n"
                   "    return (jnp.asarray(np.random.default_rng(seed).normal(size=(16, 128)),"
                   " jnp.float32),)\n")
    task = load_task(_write(tmp_path, "numpy_maker", numpy_maker))
    assert task.input_specs(0)[0].shape == (16, 128)
    unseeded = numpy_maker.replace("default_rng(seed)", "default_rng()")
    with pytest.raises(TaskError, match="not deterministic"):
        load_task(_write(tmp_path, "unseeded", unseeded))
