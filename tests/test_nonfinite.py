"""The suite's non-finite case: NaN and +/-inf planted in the floating inputs, and a kernel's
NaN and inf positions (and signs) held to the oracle's. The end-to-end rejection of a kernel
that reads NaN as 0 is in tests/test_coverage.py (nan_to_zero.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest

from tools.correctness.compare import compare_case
from tools.correctness.nonfinite import plant
from tools.correctness.suitedata import FrozenSuite, SuiteError
from tools.correctness.testsuite import build_suite, nonfinite_shape
from tools.inputs.tasks import TaskError, load_task
from tools.sandbox.wire import WireArray

ROOT = Path(__file__).resolve().parent.parent

ROWS = """
import jax, jax.numpy as jnp
SHAPES = [(64, 256), (24, 128)]
OPT_OUT
def reference(x, w, idx):
    return jnp.sum(x, axis=-1) + idx.astype(jnp.float32), jnp.tanh(x) * w
def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    kx, kw, ki = jax.random.split(key, 3)
    return (jax.random.normal(kx, (rows, cols)), jax.random.normal(kw, (cols,)),
            jax.random.randint(ki, (rows,), 0, 9, jnp.int32))
"""


def _task(tmp_path: Path, opt_out: str = "", name: str = "rows"):
    path = tmp_path / f"{name}.py"
    path.write_text(ROWS.replace("OPT_OUT", opt_out))
    return load_task(path)


def _nonfinite(suite):
    [case] = [c for c in suite.cases if c.kind == "nonfinite"]
    return case


def test_floating_inputs_get_nan_and_both_infinities_and_integers_are_untouched(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    suite = build_suite(task, seeds=(0, 1), probes=False)
    case = _nonfinite(suite)
    assert case.shape_index == nonfinite_shape(task) != 0  # the smallest, not the tuning point
    x, w, idx = (a.numpy() for a in case.inputs)
    for array in (x, w):
        assert np.isnan(array).sum() == 1 and np.isposinf(array).sum() == 1
        assert np.isneginf(array).sum() == 1
    made = task.make_inputs(0, case.shape_index)
    np.testing.assert_array_equal(idx, np.asarray(made[2]))
    # the rest of each floating input is the seed's own
    keep = np.isfinite(x)
    np.testing.assert_array_equal(x[keep], np.asarray(made[0])[keep])
    summed, scaled = (o.numpy() for o in case.oracle)
    assert not np.isfinite(summed).all()  # a row holding a NaN or inf is not finite
    assert np.isfinite(summed).any()
    assert np.isnan(scaled[:, np.isnan(w)]).all()  # a NaN weight: its whole column
    assert np.isfinite(scaled).any()
    assert any("NaN/+inf/-inf planted" in n for n in suite.notes)


def test_the_oracle_decides_where_nan_and_inf_must_come_out(tmp_path: Path) -> None:
    suite = build_suite(_task(tmp_path), seeds=(0, 1), probes=False)
    case = _nonfinite(suite)
    right = [o.numpy().astype(np.float32) for o in case.oracle]
    assert compare_case(case, right, suite.tolerance).passed

    as_zero = [np.nan_to_num(right[0], nan=0.0, posinf=0.0, neginf=0.0), right[1]]
    check = compare_case(case, as_zero, suite.tolerance)
    assert not check.passed and check.outputs[0].nonfinite > 0
    assert "NaN returned as finite numbers" in check.outputs[0].problems[0]

    flipped = right[0].copy()
    flipped[np.isinf(flipped)] *= -1  # the right positions, the wrong signs
    if np.isinf(flipped).any():
        check = compare_case(case, [flipped, right[1]], suite.tolerance)
        assert not check.passed and "infinities returned as NaN" in check.outputs[0].problems[0]

    all_nan = [right[0], np.full_like(right[1], np.nan)]  # NaN where the oracle is finite
    check = compare_case(case, all_nan, suite.tolerance)
    assert not check.passed and "where the reference is finite" in check.outputs[1].problems[-1]


def test_a_task_may_opt_out_with_a_reason_the_suite_records(tmp_path: Path) -> None:
    why = "the reference sorts its input, and NaN has no place in an order"
    task = _task(tmp_path, f"NO_NONFINITE_INPUTS = {why!r}")
    assert task.nonfinite_opt_out == {"nan": why, "inf": why}
    suite = build_suite(task, seeds=(0, 1), probes=False)
    assert not [c for c in suite.cases if c.kind == "nonfinite"]
    [note] = [n for n in suite.notes if "NO_NONFINITE_INPUTS" in n]
    assert "NOT fed" in note and why in note  # the report marks notes with NOT
    with pytest.raises(TaskError, match="NO_NONFINITE_INPUTS must be a non-empty string"):
        _task(tmp_path, "NO_NONFINITE_INPUTS = True", name="flag")
    with pytest.raises(TaskError, match="or a dict of 'nan', 'inf' or input positions"):
        _task(tmp_path, "NO_NONFINITE_INPUTS = {'nans': 'typo'}", name="typo")


def test_a_task_may_leave_out_nan_alone_and_still_get_infinities(tmp_path: Path) -> None:
    task = _task(tmp_path, "NO_NONFINITE_INPUTS = {'nan': 'NaN has no place in an order'}")
    suite = build_suite(task, seeds=(0, 1), probes=False)
    x, w, _ = (a.numpy() for a in _nonfinite(suite).inputs)
    for array in (x, w):
        assert not np.isnan(array).any()
        assert np.isposinf(array).sum() == 1 and np.isneginf(array).sum() == 1
    [note] = [n for n in suite.notes if "NO_NONFINITE_INPUTS" in n]
    assert note.startswith("NaN inputs are NOT fed") and "place in an order" in note


def test_a_task_may_leave_out_one_input_by_its_position(tmp_path: Path) -> None:
    task = _task(tmp_path, "NO_NONFINITE_INPUTS = {1: 'the weights: no kernel can follow'}")
    suite = build_suite(task, seeds=(0, 1), probes=False)
    x, w, _ = (a.numpy() for a in _nonfinite(suite).inputs)
    assert np.isnan(x).sum() == 1 and np.isfinite(w).all()
    [note] = [n for n in suite.notes if "NO_NONFINITE_INPUTS" in n]
    assert note.startswith("NaN and inf in input 1 are NOT fed") and "no kernel" in note
    with pytest.raises(TaskError, match="input positions"):
        _task(tmp_path, "NO_NONFINITE_INPUTS = {-1: 'negative'}", name="negative")


def test_a_reference_that_disagrees_with_its_own_oracle_on_nan_drops_the_case(
    tmp_path: Path,
) -> None:
    path = tmp_path / "masks.py"  # maps NaN to 0 in float32 only: not the oracle's answer
    path.write_text("import jax, jax.numpy as jnp\n"
                    "SHAPES = [(64, 256)]\n"
                    "def reference(x):\n"
                    "    y = jnp.tanh(x)\n"
                    "    return y if x.dtype == jnp.float64 else jnp.nan_to_num(y)\n"
                    "def make_inputs(key, shape_index=0):\n"
                    "    return (jax.random.normal(key, SHAPES[shape_index]),)\n")
    suite = build_suite(load_task(path), seeds=(0, 1), probes=False)
    assert not [c for c in suite.cases if c.kind == "nonfinite"]
    assert any("nonfinite dropped: the reference itself" in n for n in suite.notes), suite.notes


def test_planting_is_deterministic_and_skips_tasks_without_floats() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    first, count = plant([x, np.arange(3)])
    again, _ = plant([x, np.arange(3)])
    np.testing.assert_array_equal(first[0], again[0])
    assert count == 3 and np.isfinite(x).all()  # the caller's array is left alone
    assert plant([np.arange(5), np.zeros(3, bool)]) is None


def test_where_every_element_would_be_nan_only_the_first_input_gets_specials(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mlp.py"  # a NaN weight of the first layer reaches every output
    path.write_text("import jax, jax.numpy as jnp\n"
                    "SHAPES = [(64, 128)]\n"
                    "def reference(x, w1, w2):\n"
                    "    return jnp.tanh(x @ w1) @ w2\n"
                    "def make_inputs(key, shape_index=0):\n"
                    "    k = jax.random.split(key, 3)\n"
                    "    return tuple(jax.random.normal(k[i], (64, 128) if i == 0 else "
                    "(128, 128)) for i in range(3))\n")
    suite = build_suite(load_task(path), seeds=(0, 1), probes=False)
    case = _nonfinite(suite)
    x, w1, w2 = (a.numpy() for a in case.inputs)
    assert np.isnan(x).sum() == 1 and np.isfinite(w1).all() and np.isfinite(w2).all()
    out = case.oracle[0].numpy()
    assert np.isfinite(out).any() and not np.isfinite(out).all()
    assert any("input 0 alone" in n for n in suite.notes)


# Causal attention as the shipped task writes it (softmax weights 0 above the diagonal, then
# times v: a NaN value of a later token makes the oracle NaN for every earlier query).
CAUSAL = """
import jax, jax.numpy as jnp
SHAPES = [(1, 2, 256, 64), (1, 1, 128, 64)]
def reference(q, k, v):
    seq = q.shape[2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    allowed = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    s = jnp.where(allowed, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
def make_inputs(key, shape_index=0):
    ks = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, SHAPES[shape_index], jnp.float32) for k in ks)
"""
BLOCK = 32


def _flash_causal(q, k, v, *, clean: bool = False):
    """A flash-attention kernel (interpret mode) that never visits a KV block wholly above
    the diagonal, as a real one skips it; ``clean`` reads NaN and inf inputs as 0."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    b, h, seq, d = q.shape

    def body(q_ref, k_ref, v_ref, o_ref):
        qi = pl.program_id(1)
        qb = q_ref[0]
        if clean:
            qb = jnp.nan_to_num(qb, nan=0.0, posinf=0.0, neginf=0.0)
        rows = qi * BLOCK + jnp.arange(BLOCK)[:, None]

        def step(j, carry):
            m, den, acc = carry
            kb = k_ref[0, pl.ds(j * BLOCK, BLOCK), :]
            vb = v_ref[0, pl.ds(j * BLOCK, BLOCK), :]
            if clean:
                kb = jnp.nan_to_num(kb, nan=0.0, posinf=0.0, neginf=0.0)
                vb = jnp.nan_to_num(vb, nan=0.0, posinf=0.0, neginf=0.0)
            s = (qb @ kb.T) * (d ** -0.5)
            s = jnp.where(rows >= j * BLOCK + jnp.arange(BLOCK)[None, :], s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(axis=-1, keepdims=True))
            p = jnp.exp(s - m_new)
            scale = jnp.exp(m - m_new)
            return m_new, den * scale + p.sum(-1, keepdims=True), acc * scale + p @ vb

        init = (jnp.full((BLOCK, 1), -jnp.inf), jnp.zeros((BLOCK, 1)), jnp.zeros((BLOCK, d)))
        _, den, acc = jax.lax.fori_loop(0, qi + 1, step, init)  # blocks past qi: skipped
        o_ref[0] = acc / den

    flat = [x.reshape(b * h, seq, d) for x in (q, k, v)]
    whole = pl.BlockSpec((1, seq, d), lambda i, j: (i, 0, 0))
    out = pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(flat[0].shape, jnp.float32),
        grid=(b * h, seq // BLOCK),
        in_specs=[pl.BlockSpec((1, BLOCK, d), lambda i, j: (i, j, 0)), whole, whole],
        out_specs=pl.BlockSpec((1, BLOCK, d), lambda i, j: (i, j, 0)), interpret=True,
    )(*flat)
    return np.asarray(out).reshape(q.shape)


def test_a_kernel_that_skips_masked_kv_blocks_passes_where_only_zero_x_nan_is_nan(
    tmp_path: Path,
) -> None:
    (tmp_path / "causal.py").write_text(CAUSAL)
    suite = build_suite(load_task(tmp_path / "causal.py"), seeds=(0, 1), probes=False)
    case = _nonfinite(suite)
    q, k, v = (a.numpy() for a in case.inputs)
    oracle = case.oracle[0].numpy()
    [free] = (f.numpy() for f in case.unplanted)
    # v's NaN (and infinities) reach every earlier query only through a zero weight
    assert (~np.isnan(free)).sum() > 0 and np.isfinite(free[~np.isnan(free)]).all()
    assert not np.isfinite(oracle[~np.isnan(free)]).any()
    assert any("planted elements they do not depend on" in n for n in suite.notes)

    # recorded in the suite's hash: a widened allowance no longer matches
    wider = np.where(np.isnan(free), 0.0, free)
    cases = tuple(msgspec.structs.replace(c, unplanted=(WireArray.of(wider),))
                  if c.case_id == case.case_id else c for c in suite.cases)
    with pytest.raises(SuiteError, match="hash does not match"):
        FrozenSuite.from_bytes(msgspec.structs.replace(suite, cases=cases).to_bytes())

    skipping = _flash_causal(q, k, v)
    # past its diagonal block it never computed 0 x NaN; within it, it did, as the oracle
    assert np.isfinite(skipping[~np.isnan(free)]).any()
    assert not np.isfinite(skipping[~np.isnan(free)]).all()
    check = compare_case(case, [skipping], suite.tolerance)
    assert check.passed, check.outputs[0].problems
    assert check.outputs[0].unplanted == int(np.isfinite(skipping[~np.isnan(free)]).sum())
    # the oracle's own NaN there still passes
    assert compare_case(case, [oracle.astype(np.float32)], suite.tolerance).passed
    # a finite value there is held to the value without the planted elements
    off = skipping.copy()
    off[~np.isnan(free)] += 1.0
    assert not compare_case(case, [off], suite.tolerance).passed

    # where the output truly depends on a planted value, a finite number is still wrong
    cleaned = _flash_causal(q, k, v, clean=True)
    check = compare_case(case, [cleaned], suite.tolerance)
    assert not check.passed and "NaN returned as finite numbers" in check.outputs[0].problems[0]
    depends = ~np.isfinite(oracle) & np.isnan(free)
    assert depends.any()
    patched = skipping.copy()
    patched[depends] = 0.0
    assert not compare_case(case, [patched], suite.tolerance).passed


def test_nothing_recorded_where_every_non_finite_element_depends_on_a_planted_one(
    tmp_path: Path,
) -> None:
    suite = build_suite(_task(tmp_path), seeds=(0, 1), probes=False)
    case = _nonfinite(suite)
    assert case.unplanted == ()  # a row sum and an element-wise product: nothing masked
    assert not any("planted elements they do not depend on" in n for n in suite.notes)
