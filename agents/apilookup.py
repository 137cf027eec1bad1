"""The fixer's JAX API lookup: signatures, docstrings and "did you mean" over Pallas names.

It reads the installed `jax.experimental.pallas` and `jax.experimental.pallas.tpu`, so the
answer matches the JAX the kernel runs on, not the one a model was trained on.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from functools import cache

MODULES = {"pl": "jax.experimental.pallas", "pltpu": "jax.experimental.pallas.tpu",
           "jax.lax": "jax.lax", "jnp": "jax.numpy"}
_NAME = re.compile(r"\b(pl|pltpu|jax\.lax|lax|jnp)\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING_ATTR = re.compile(r"has no attribute '([A-Za-z_][A-Za-z0-9_]*)'")


@cache
def _names(alias: str) -> dict[str, object]:
    module = importlib.import_module(MODULES[alias])
    return {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}


def describe(alias: str, name: str, *, doc_lines: int = 6) -> str:
    """`alias.name(signature)` and the first docstring lines, or close matches."""
    names = _names(alias)
    if name not in names:
        close = difflib.get_close_matches(name, list(names), n=4, cutoff=0.6)
        hint = f"did you mean {', '.join(f'{alias}.{c}' for c in close)}?" if close else "no close match"
        return f"{alias}.{name} does not exist in {MODULES[alias]}: {hint}"
    obj = names[name]
    try:
        signature = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        signature = ""
    doc = (inspect.getdoc(obj) or "").strip().splitlines()[:doc_lines]
    return "\n".join([f"{alias}.{name}{signature}", *(f"    {line}" for line in doc)])


def lookup(code: str, diagnostics: str, *, limit: int = 8) -> str:
    """API facts for the names the diagnostics and the code's failing lines mention."""
    wanted: list[tuple[str, str]] = []
    for alias, name in _NAME.findall(diagnostics) + _NAME.findall(code):
        alias = "jax.lax" if alias == "lax" else alias
        if (alias, name) not in wanted:
            wanted.append((alias, name))
    for missing in _MISSING_ATTR.findall(diagnostics):
        for alias in ("pl", "pltpu"):
            if (alias, missing) not in wanted:
                wanted.insert(0, (alias, missing))
    entries = [describe(alias, name) for alias, name in wanted[:limit]]
    return "\n\n".join(entries) or "(no Pallas names found in the diagnostics)"
