"""The offline author's output is valid code or a refusal with its reason: one small task per
class of bug seen on JAXBench (operand-less primitives, shape-language dims, bf16 literals and
dots, dtype tiling, primitives Mosaic cannot lower, exceptions inside the author)."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.llm.base import LlmRequest, ProviderError
from agents.llm.offline import OfflineProvider, provider
from agents.llm.offline.check import checked_source
from agents.llm.offline.classify import classify_task
from agents.llm.parsing import check_plan, extract_code

HEADER = "import jax\nimport jax.numpy as jnp\nfrom jax import lax\n\n"


def _task(tmp_path: Path, name: str, body: str, shapes: list[list[tuple[int, ...]]],
          dtype: str = "float32") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(
        HEADER + f"SHAPES = {shapes!r}\n\n{body}\n\n"
        "def make_inputs(key, shape_index=0):\n"
        "    shapes = SHAPES[shape_index]\n"
        "    keys = jax.random.split(key, len(shapes))\n"
        f"    return tuple(jax.random.normal(k, s, jnp.float32).astype(jnp.{dtype})\n"
        "                 for k, s in zip(keys, shapes))\n")
    return path


def _ctx(task: Path, **extra: Any) -> dict[str, Any]:
    from tools.api import chip_figures

    return {"task_path": str(task), "task_name": task.stem, "target": "sim-tpu-v6e",
            "chip": chip_figures("sim-tpu-v6e"), "iteration": 0, "seed": 0, "parent": None,
            "failures": [], "hint": "", "knowledge": [], "baseline_s": None, "feedback": "", **extra}


def _ask(purpose: str, context: dict[str, Any]) -> str:
    request = LlmRequest(agent="test", purpose=purpose, prompt="", context=context, seed=0)
    return asyncio.run(OfflineProvider(seed=0).complete(request)).text


def _kernel(task: Path, **extra: Any) -> str:
    """The implementer's candidate for the author's own plan; it must parse (extract_code)."""
    plan = check_plan(_ask("plan", _ctx(task, **extra)))
    code = extract_code(_ask("implement", _ctx(task, plan=plan, **extra)))
    ast.parse(code)
    return code


def _body_matches_reference(task: Path, code: str, rtol: float, atol: float) -> None:
    """The candidate's `_body` (the reference's jaxpr written out) computes the reference."""
    from tools.api import load_task

    loaded = load_task(task)
    inputs = loaded.make_inputs(0, 0)
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(code, str(task), "exec"), namespace)
    dims = classify_task(task).dim_values
    (got,) = namespace["_body"](*inputs, **dims)
    want = loaded.reference(*inputs)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=rtol, atol=atol)


def test_an_operand_less_primitive_is_written_as_valid_python(tmp_path: Path) -> None:
    """`iota` binds no operands: `lax.iota_p.bind(, ...)` did not parse (JAXBench 10p, 13p,
    15p, 16p)."""
    task = _task(tmp_path, "iota", "def reference(x):\n"
                 "    cols = lax.broadcasted_iota(jnp.float32, x.shape, 1)\n"
                 "    return x * cols + jnp.max(x, axis=-1, keepdims=True)",
                 [[(64, 256)], [(32, 256)]])
    code = _kernel(task)
    assert "lax.broadcasted_iota(jnp.int32, (" in code  # Mosaic's iota counts in int32
    _body_matches_reference(task, code, 1e-6, 1e-6)


def test_a_shape_language_dim_is_written_with_python_operators(tmp_path: Path) -> None:
    """A reshape to (B, 4, C // 4) over a symbolic C: `floordiv(D1, 4)` was a NameError
    (JAXBench 40k)."""
    task = _task(tmp_path, "groups", "def reference(x):\n"
                 "    b, c = x.shape\n"
                 "    g = x.reshape(b, 4, c // 4)\n"
                 "    return (g - g.mean(axis=-1, keepdims=True)).reshape(b, c)",
                 [[(64, 256)], [(32, 512)]])
    code = _kernel(task)
    assert "floordiv" not in code and "// 4" in code
    _body_matches_reference(task, code, 1e-5, 1e-5)


def test_bf16_dots_accumulate_in_f32_and_bf16_literals_exist(tmp_path: Path) -> None:
    """A batched bf16 einsum plus a bf16 constant: the dot was bound with a bf16 accumulator
    (Mosaic refuses it; JAXBench 9p, 14p) and the constant written `np.bfloat16(...)`, which
    numpy does not have (17p)."""
    task = _task(tmp_path, "bf16_bmm", "def reference(x, w):\n"
                 "    y = jnp.einsum('bij,jk->bik', x, w)\n"
                 "    return y * jnp.bfloat16(0.5) + jnp.bfloat16(1e-3)",
                 [[(4, 16, 128), (128, 128)], [(2, 16, 128), (128, 128)]], dtype="bfloat16")
    code = _kernel(task)
    tree = ast.parse(code)
    attrs = {f"np.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id == "np"}
    assert all(hasattr(np, a.removeprefix("np.")) for a in attrs), attrs
    dots = [line for line in code.splitlines() if "lax.dot_general(" in line or "jnp.dot(" in line]
    assert dots and all("preferred_element_type=jnp.float32" in d
                        and d.rstrip().endswith(".astype(jnp.bfloat16)") for d in dots)
    _body_matches_reference(task, code, 2e-2, 2e-2)


def _tunables(code: str) -> dict[str, list[int]]:
    match = re.search(r"^TUNABLES = (\{.*\})$", code, re.M)
    assert match, code[:400]
    return ast.literal_eval(match.group(1))


@pytest.mark.parametrize(("dtype", "tile"), [("bfloat16", 16), ("int8", 32)])
def test_row_blocks_respect_the_dtypes_sublane_tile(tmp_path: Path, dtype: str, tile: int) -> None:
    """2-D row blocks of a 16-bit (8-bit) array hold a multiple of 16 (32) rows, in the first
    kernel and in every rung of the fixer's ladder (JAXBench 49k)."""
    task = _task(tmp_path, f"rows_{dtype}", "def reference(x):\n    return x * x + x",
                 [[(1024, 256)], [(512, 256)]], dtype=dtype)
    code = _kernel(task)
    assert re.search(rf"^_ROW_ALIGN = {tile}$", code, re.M), code[:600]
    seen = [code]
    for rung in (1, 2, 3):
        fixed = extract_code(_ask("fix", _ctx(task, code=seen[-1], round=rung, history=[],
                                              diagnostics=[{"message": "lowering failed"}])))
        seen.append(fixed)
    for text in seen:
        if "block_rows" in text:
            assert all(v % tile == 0 for v in _tunables(text)["block_rows"]), _tunables(text)


def test_matmul_blocks_respect_the_bf16_tile_down_the_fixers_ladder(tmp_path: Path) -> None:
    """M = 48: the ladder's halved block (24 rows) is no multiple of bf16's 16-row tile."""
    task = _task(tmp_path, "mm_bf16", "def reference(a, b):\n    return jnp.tanh(a @ b)",
                 [[(48, 512), (512, 256)], [(32, 512), (512, 256)]], dtype="bfloat16")
    code = _kernel(task)
    assert "block_m" in code
    for rung in (1, 2):
        code = extract_code(_ask("fix", _ctx(task, code=code, round=rung, history=[],
                                             diagnostics=[{"message": "block shape"}])))
        tunables = _tunables(code)
        if "block_m" in tunables:
            assert all(v % 16 == 0 for v in tunables["block_m"]), tunables
            assert all(v % 128 == 0 for v in tunables["block_n"]), tunables


def test_a_primitive_mosaic_cannot_lower_is_refused_by_name(tmp_path: Path) -> None:
    """An overlapping max-pool window has no Mosaic TPU rule (and no rewrite): refused naming
    it, not a candidate that fails. (Convolutions have their own class: test_offline_conv.)"""
    task = _task(tmp_path, "maxpool", "def reference(x):\n"
                 "    y = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 1, 1), 'VALID')\n"
                 "    return jnp.maximum(y, 0.0)",
                 [[(2, 4, 16, 16)], [(1, 4, 16, 16)]])
    with pytest.raises(ProviderError, match=r"^unsupported: .*'reduce_window_max' has no "
                       "Mosaic TPU lowering"):
        _ask("plan", _ctx(task))


def test_an_exception_inside_the_author_becomes_an_unsupported_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = _task(tmp_path, "ew", "def reference(x):\n    return x * 2.0", [[(64, 256)], [(32, 256)]])
    plan = check_plan(_ask("plan", _ctx(task)))

    def broken(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a writer's internal invariant")

    monkeypatch.setattr(provider, "candidate_source", broken)
    with pytest.raises(ProviderError, match=r"^unsupported: .*AssertionError: a writer's internal"):
        _ask("implement", _ctx(task, plan=plan))


@pytest.mark.parametrize(("code", "why"), [
    ("def build():\n    return lax.iota_p.bind(, dimension=0)\n", "does not parse"),
    ("def build():\n    return floordiv(8, 2)\n", "undefined names: floordiv"),
    ("import numpy as np\n\ndef build():\n    return np.bfloat16(1.0)\n", "np.bfloat16"),
])
def test_the_author_never_returns_code_that_cannot_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, why: str) -> None:
    """Whatever a writer produces, what leaves the author parses and reads only defined names."""
    task = _task(tmp_path, "ew2", "def reference(x):\n    return x + 1.0", [[(64, 256)], [(32, 256)]])
    plan = check_plan(_ask("plan", _ctx(task)))
    monkeypatch.setattr(provider, "candidate_source", lambda *a, **k: code)
    with pytest.raises(ProviderError, match=rf"^unsupported: .*{re.escape(why)}"):
        _ask("implement", _ctx(task, plan=plan))
    ok = "import jax\nfrom jax import lax\n\ndef build(n=4):\n    return [lax.iota(int, n) for _ in range(n)]\n"
    assert checked_source(ok) == ok


@pytest.mark.slow
def test_a_bf16_batched_dot_kernel_verifies(tmp_path: Path) -> None:
    """End to end: the bf16 batched-dot task's first kernel passes the verifier."""
    from tools.api import evaluate

    task = _task(tmp_path, "bf16_bmm_e2e", "def reference(x, w):\n"
                 "    return jnp.einsum('bij,jk->bik', x, w) + jnp.bfloat16(1e-3)",
                 [[(4, 16, 128), (128, 128)], [(2, 16, 128), (128, 128)]], dtype="bfloat16")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(_kernel(task))
    verdict = evaluate(task, candidate, target="sim-tpu-v6e")
    assert verdict.passed, (verdict.reasons, [d.message for d in verdict.diagnostics][:3])




def test_a_scalar_output_with_a_float_iota_runs_in_interpret_mode(tmp_path: Path) -> None:
    """A 0-d output (a mean) is written through a (1, 1) block and reshaped after, and a float
    iota counts in int32 (Mosaic's iota is integer-only; JAXBench 13p, 15p)."""
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    task = _task(tmp_path, "scalar_iota", "def reference(x):\n"
                 "    cols = lax.broadcasted_iota(jnp.float32, x.shape, 1)\n"
                 "    return jnp.mean((x - cols * 0.01) ** 2)",
                 [[(64, 256)], [(32, 256)]])
    code = _kernel(task)
    assert "lax.broadcasted_iota(jnp.int32, (" in code and "(1, 1)" in code
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(code, str(task), "exec"), namespace)
    loaded = load_task(task)
    (x,) = loaded.make_inputs(0, 0)
    with pltpu.force_tpu_interpret_mode():
        got = namespace["build"]()(x)
    want = loaded.reference(x)
    assert got.shape == want.shape == ()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
