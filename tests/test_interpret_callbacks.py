"""Interpret mode's own host callbacks get host copies of their arguments
(`tools.child.callbacks`); what a kernel computes, what the race detector finds, and every
other callback, are unchanged. The children's wrappers (a RaceLog) are installed, as there."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tools import jaxprivate
from tools.child import callbacks, interpret
from tools.child.guard import IntegrityGuard

_LOG = interpret.RaceLog()


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    _LOG.install()


def _kernel(x_hbm: Any, o_ref: Any, buffer: Any, sem: Any) -> None:
    step = pl.program_id(0)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(step * 8, 8)], buffer, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buffer[...] * 2.0 + step.astype(jnp.float32)


def _doubled(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((8, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA(())],
    )(x)


def _racing_kernel(x_ref: Any, o_hbm: Any, sem: Any) -> None:
    """Both cores copy their block to the same rows of the output: a race."""
    copy = pltpu.make_async_copy(x_ref, o_hbm.at[pl.ds(0, 8)], sem)
    copy.start()
    copy.wait()


def _racing(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _racing_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
        in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


def _run(races: bool) -> bytes:
    x = jnp.asarray(np.random.default_rng(0).standard_normal((32, 128)), jnp.float32)
    run = interpret.interpreted(jax.make_jaxpr(_doubled)(x), interpret.InterpretSettings(
        detect_races=races, num_cores=1, random_seed=3))
    mark = len(_LOG.states)
    out = np.asarray(run(x)[0])
    np.testing.assert_array_equal(out[8:16], np.asarray(x)[8:16] * 2 + 1)
    assert not _LOG.races_since(mark)
    assert _LOG.visits[-1].summary()  # the children's transfer counts saw the run
    return out.tobytes()


def _race_found() -> bool:
    x = jnp.ones((16, 128), jnp.float32)
    run = interpret.interpreted(jax.make_jaxpr(_racing)(x), interpret.InterpretSettings(
        detect_races=True, num_cores=2, random_seed=3))
    mark = len(_LOG.states)
    np.asarray(run(x)[0])
    return _LOG.races_since(mark)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """`callbacks.install()` for this test only, recording how each callback was classed."""
    module = jaxprivate.callback()
    monkeypatch.setattr(module, "io_callback_impl", module.io_callback_impl)  # restored after
    seen: list[tuple[str, bool]] = []
    classify = callbacks.is_interpreter_callback

    def recording(callback: Any) -> bool:
        function = callback.callback_func
        while isinstance(function, functools.partial):
            function = function.func
        seen.append((getattr(function, "__name__", "?"), classify(callback)))
        return seen[-1][1]

    monkeypatch.setattr(callbacks, "is_interpreter_callback", recording)
    callbacks.install()
    return seen


@pytest.mark.parametrize("races", [False, True])
def test_a_kernel_computes_the_same_bytes_with_host_arguments(
        races: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _run(races)
    module = jaxprivate.callback()
    monkeypatch.setattr(module, "io_callback_impl", module.io_callback_impl)
    callbacks.install()
    assert getattr(module.io_callback_impl, "host_arguments", False)
    assert _run(races) == before


def test_the_race_detector_still_finds_a_race(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _race_found()
    module = jaxprivate.callback()
    monkeypatch.setattr(module, "io_callback_impl", module.io_callback_impl)
    callbacks.install()
    assert _race_found()


def test_the_interpreter_callbacks_take_the_host_path_and_others_do_not(
        installed: list[tuple[str, bool]]) -> None:
    _run(races=True)
    # the children's counting wrappers of get and dma_start, and the interpreter's own
    assert {"counting_get", "counting_dma_start", "swap", "dma_wait"} <= {
        n for n, host in installed if host}
    assert not [n for n, host in installed if not host]

    received: list[type] = []

    def host_side(x: Any) -> np.ndarray:
        received.append(type(x))
        return np.asarray(x) + 1

    @jax.jit
    def uses_a_callback(x: jax.Array) -> jax.Array:
        return io_callback(host_side, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    np.testing.assert_array_equal(np.asarray(uses_a_callback(jnp.ones(4))), np.full(4, 2.0))
    assert ("host_side", False) in installed
    assert received and all(issubclass(t, jax.Array) for t in received)  # as JAX gives


def test_install_is_once_and_a_later_replacement_is_named_by_the_guard(
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = jaxprivate.callback()
    monkeypatch.setattr(module, "io_callback_impl", module.io_callback_impl)
    callbacks.install()
    first = module.io_callback_impl
    callbacks.install()
    assert module.io_callback_impl is first
    guard = IntegrityGuard()
    monkeypatch.setattr(module, "io_callback_impl", lambda *a, **k: [])
    assert f"{jaxprivate.PRIVATE_ROOT}.callback.io_callback_impl" in guard.changed()
