"""`make_inputs` written from a signature: one PRNG split per argument, per-shape tables."""

from __future__ import annotations

from typing import Any

_FLOAT = {"float32", "float16", "bfloat16", "float64"}


def _arg_lines(index: int, arg: dict[str, Any]) -> tuple[list[str], str]:
    dtype = str(arg.get("dtype") or "float32")
    shapes = [tuple(int(d) for d in s) for s in arg.get("shapes") or [()]]
    table = f"_SHAPES_{index}"
    pick = f"{table}[min(shape_index, len({table}) - 1)]"
    if dtype in _FLOAT:
        make = f"jax.random.normal(keys[{index}], {pick}, jnp.{dtype})"
    elif dtype == "bool":
        make = f"jax.random.bernoulli(keys[{index}], 0.5, {pick})"
    else:
        make = f"jax.random.randint(keys[{index}], {pick}, 0, 8).astype(jnp.{dtype})"
    return [f"    {_name(arg, index)} = {make}"], f"{table} = {shapes!r}"


def _name(arg: dict[str, Any], index: int) -> str:
    name = str(arg.get("name") or f"arg{index}")
    return name if name.isidentifier() and name not in ("key", "keys", "shape_index") else f"arg{index}"


def inputs_source(signature: dict[str, Any]) -> str:
    """A standalone module defining `make_inputs(key, shape_index=0)` -> tuple of arrays."""
    args = list(signature.get("args") or [])
    tables: list[str] = []
    body: list[str] = []
    for i, arg in enumerate(args):
        lines, table = _arg_lines(i, arg)
        body += lines
        tables.append(table)
    names = [_name(a, i) for i, a in enumerate(args)]
    result = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    return "\n".join([
        '"""Inputs for the task: normal floats, small integers, fair booleans; one key per argument."""',
        "",
        "from __future__ import annotations",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "",
        *tables,
        "",
        "",
        "def make_inputs(key, shape_index=0):",
        f"    keys = jax.random.split(key, {max(len(args), 1)})",
        *body,
        f"    return {result}",
        "",
        "",
        "def build():",
        '    """Not a kernel: the inputs module carries `build` so it reads as a candidate file."""',
        "    return make_inputs",
        "",
    ])
