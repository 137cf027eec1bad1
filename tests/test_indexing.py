"""What a reference measures its integer inputs against (tools.inputs.indexing): the
extents they index and the iota extents and integer literals they meet."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tools.inputs.indexing import index_signature


def _spec(shape: tuple[int, ...], dtype: object = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _gather_rows(x: jax.Array, rows: jax.Array) -> jax.Array:
    return x[rows]


def _masked_rows(x: jax.Array, lengths: jax.Array) -> jax.Array:
    return jnp.where(jnp.arange(x.shape[1])[None, :] < lengths[:, None], x, 0.0)


def test_a_gather_records_the_extent_its_indices_address_and_floats_record_nothing() -> None:
    signature = index_signature(_gather_rows, [_spec((48, 8)), _spec((5,), jnp.int32)])
    assert set(signature) == {1}  # the float operand is not an index
    assert signature[1][("index", (48,))] == 1


def test_a_mask_records_the_iota_extent_a_length_is_compared_with() -> None:
    signature = index_signature(_masked_rows, [_spec((4, 64)), _spec((4,), jnp.int32)])
    assert signature[1][("iota", 64)] >= 1


def test_the_signature_moves_with_the_indexed_extent_and_not_with_the_others() -> None:
    def at(rows: int, width: int) -> dict:
        return index_signature(_gather_rows, [_spec((rows, width)), _spec((5,), jnp.int32)])

    assert at(48, 8) == at(48, 2)  # the gathered rows' width is not what the index addresses
    assert at(48, 8) != at(12, 8)


def test_dynamic_slices_and_calls_are_followed() -> None:
    @jax.jit
    def inner(x: jax.Array, start: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice_in_dim(x, start, 4)

    def outer(x: jax.Array, starts: jax.Array) -> jax.Array:
        return inner(x, starts[0])

    signature = index_signature(outer, [_spec((40,)), _spec((2,), jnp.int32)])
    assert signature[1][("index", (40,))] == 1
