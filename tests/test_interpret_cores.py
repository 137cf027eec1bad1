"""Two simulated cores only where the grid gives the second one work.

The runner runs one case on two simulated cores so the race detector sees conflicts between
them. Interpret mode divides only parallel grid dimensions between cores, so for a program
with none the second core idles and the case costs more for nothing (ragged paged attention's
one-step-per-sequence grid: 32 s against 23 s a case). These tests pin both halves: which
programs count as split, and that interpret mode really leaves core 1 idle on the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tools.child import interpret

_LOG = interpret.RaceLog()


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    _LOG.install()


def _double(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2


def _doubled(x: jax.Array, semantics: tuple[str, ...], rows: int = 8) -> jax.Array:
    blocks = x.shape[0] // rows
    return pl.pallas_call(
        _double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(blocks,),
        in_specs=[pl.BlockSpec((rows, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)


X = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)


def _traced(fn: Callable[[jax.Array], jax.Array]) -> Any:
    return jax.jit(fn).trace(X).jaxpr


@pytest.mark.parametrize(("fn", "split"), [
    (lambda x: _doubled(x, ("parallel",)), True),
    (lambda x: _doubled(x, ("arbitrary",)), False),
    (lambda x: _doubled(x, ("parallel",), rows=32), False),  # one grid point
    (lambda x: _doubled(_doubled(x, ("arbitrary",)), ("parallel",)), True),
    (lambda x: x * 2, False),
])
def test_a_program_is_split_only_where_a_parallel_dimension_has_several_points(
        fn: Callable[[jax.Array], jax.Array], split: bool) -> None:
    assert interpret.splits_across_cores(_traced(fn)) is split


@pytest.mark.parametrize(("semantics", "cores_used"), [(("parallel",), 2), (("arbitrary",), 1)])
def test_interpret_mode_gives_the_second_core_grid_points_only_along_parallel_dimensions(
        semantics: tuple[str, ...], cores_used: int) -> None:
    run = interpret.interpreted(_traced(lambda x: _doubled(x, semantics)),
                                interpret.InterpretSettings(num_cores=2, random_seed=3))
    mark = _LOG.mark()
    (out,) = run(X)
    assert jnp.array_equal(out, X * 2)
    (visits,) = _LOG.visits_since(mark)
    assert visits["grid_points"] == 4 and visits["cores"] == cores_used
