"""Emitted kernel bodies read like hand-written JAX (`jnp`/`lax` functions, named
intermediates) and compute bit for bit what the reference and the primitive-bind form do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.llm.offline.classify import classify_task
from agents.llm.offline.jaxpr_readable import divisions_as, has_float_division
from agents.llm.offline.jaxpr_source import flatten, function_source

ROOT = Path(__file__).resolve().parents[2]
CLASSES_WITHOUT_BODY = {"grouped_matmul", "linear_attention", "paged_attention"}
"""Shipped classes found by their numbers whose references (a scan, a gather, ragged_dot)
write out as no kernel body."""
SHIPPED = sorted(p.stem for p in (ROOT / "tasks").glob("*.py") if p.stem != "__init__")


def _run(source: str, name: str, inputs: Any, dims: dict[str, int]) -> list[np.ndarray]:
    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "np": np, "lax": jax.lax}
    exec(compile(source, "body.py", "exec"), namespace)
    out = jax.jit(lambda *a: namespace[name](*a, **dims))(*inputs)
    return [np.asarray(o) for o in jax.tree.leaves(out)]


def _bitwise(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), float(np.max(np.abs(g.astype(np.float64)
                                                                - w.astype(np.float64))))


@pytest.mark.slow
@pytest.mark.parametrize("task", SHIPPED)
def test_every_shipped_body_computes_the_reference_bit_for_bit(task: str) -> None:
    from tools.api import load_task

    facts = classify_task(ROOT / "tasks" / f"{task}.py")
    if not facts.body_source:  # these classes' writers compute from their own templates
        assert facts.kernel_class in CLASSES_WITHOUT_BODY, (task, facts.reasons)
        return
    assert "_p.bind" not in facts.body_source and "_nary" not in facts.body_source
    loaded = load_task(ROOT / "tasks" / f"{task}.py")
    inputs = loaded.make_inputs(0, 0)
    want = [np.asarray(o) for o in jax.tree.leaves(jax.jit(loaded.reference)(*inputs))]
    _bitwise(_run(facts.body_source, "_body", inputs, facts.dim_values), want)


BF16_AND_INTS = """
def reference(x, w, n):
    h = x.astype(jnp.bfloat16)
    s = jnp.sum(h, axis=-1, keepdims=True, dtype=jnp.bfloat16)
    m = jnp.max(h, axis=-1)
    q = lax.div(n, jnp.int32(3)) + lax.rem(n, jnp.int32(3))
    cols = lax.broadcasted_iota(jnp.float32, x.shape, 1)
    z = jnp.where(x > 0.5, x * 2.0, -1.0) / (jnp.abs(w) + 1.0)
    d = jnp.dot(h, h.T, preferred_element_type=jnp.float32)
    p = lax.integer_pow(x, 3) + lax.pow(jnp.abs(x) + 1.0, 0.5)
    r = jnp.concatenate([x, x.T[: x.shape[0], : x.shape[1]]], axis=1)
    a = jnp.argmax(x, axis=1)
    t = jnp.sum(h.reshape(16, 2, 64), axis=(1, 2), dtype=jnp.bfloat16)
    return t, s, m, q, cols * z, d, p, r, a, lax.clamp(-1.0, x, 1.0), jax.nn.sigmoid(x)
"""


def _forms(body: str, shapes: list[tuple[tuple[int, ...], Any]]) -> tuple[str, str, Any]:
    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "lax": jax.lax}
    exec(compile(body, "reference.py", "exec"), namespace)
    specs = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    invars, eqns, outvars, consts = flatten(jax.make_jaxpr(namespace["reference"])(*specs))
    new = function_source("_body", eqns, invars, outvars, [], consts)
    old = function_source("_body", eqns, invars, outvars, [], consts, readable=False)
    return new, old, namespace["reference"]


def test_the_readable_form_binds_the_same_primitives_bit_for_bit() -> None:
    """bf16 sums stay in bf16 (jnp.sum would accumulate in f32), integer division stays
    lax.div (x / y is a true division), literals beside arrays keep their dtype."""
    shapes = [((16, 128), jnp.float32), ((16, 128), jnp.float32), ((16,), jnp.int32)]
    new, old, reference = _forms(BF16_AND_INTS, shapes)
    assert "_p.bind" in old and "_p.bind" not in new and "_nary" not in new
    for form in ("lax.reduce(", "jnp.max(", "lax.div(", "lax.rem(", "jnp.where(", ".astype(",
                 "jnp.dot(", "lax.integer_pow(", "lax.pow(", "jnp.concatenate(", "lax.argmax(",
                 "lax.clamp(", "lax.logistic(", " / "):
        assert form in new, (form, new)
    assert not re.search(r"\bv\d+\b", new)  # intermediates are named, not numbered
    key = jax.random.key(1)
    x, w = (jax.random.normal(k, (16, 128), jnp.float32) for k in jax.random.split(key))
    n = jax.random.randint(key, (16,), -50, 50, jnp.int32)
    want = [np.asarray(o) for o in jax.tree.leaves(jax.jit(reference)(x, w, n))]
    _bitwise(_run(new, "_body", (x, w, n), {}), _run(old, "_body", (x, w, n), {}))
    _bitwise(_run(new, "_body", (x, w, n), {}), want)


def test_float_divisions_are_found_and_rewritten_for_the_reciprocal_lever() -> None:
    body = "def _body(a0, a1):\n    quot = a0 / a1\n    lo = lax.div(a1, a0)\n    return (quot,)"
    assert has_float_division(body) and not has_float_division(body.replace(" / ", " * "))
    assert "quot = _div(a0, a1)" in divisions_as(body, "_div")
    assert "lax.div(a1, a0)" in divisions_as(body, "_div")


GROUPS = """
def reference(x):
    b, c = x.shape
    g = x.reshape(b, 4, c // 4)
    return (g - g.mean(axis=(1, 2), keepdims=True)).reshape(b, c)
"""


def test_emitted_bodies_are_lint_clean(tmp_path: Path) -> None:
    """Including symbolic sizes (`np.int32(C // 4 * 4)`, no extraneous parentheses: UP034)."""
    new, _, _ = _forms(BF16_AND_INTS, [((16, 128), jnp.float32), ((16, 128), jnp.float32),
                                       ((16,), jnp.int32)])
    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp}
    exec(compile(GROUPS, "reference.py", "exec"), namespace)
    rows, cols = jax.export.symbolic_shape("B, C", constraints=("C >= 8", "B >= 8"))
    invars, eqns, outvars, consts = flatten(jax.make_jaxpr(namespace["reference"])(
        jax.ShapeDtypeStruct((rows, cols), jnp.float32)))
    grouped = function_source("_grouped", eqns, invars, outvars, ["B", "C"], consts)
    assert "np.int32(" in grouped and "floordiv" not in grouped
    new += "\n\n\n" + grouped
    path = tmp_path / "body.py"
    imports = ["import jax.numpy as jnp", "import numpy as np" if "np." in new else "",
               "from jax import lax"]
    path.write_text("\n".join(i for i in imports if i) + "\n\n\n" + new + "\n")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
