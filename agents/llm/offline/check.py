"""The author's own gate on what it hands back: a candidate that does not parse, or that reads
a name nothing defines, is never shipped; it becomes `ProviderError("unsupported: ...")`.

The name check is module-wide and scope-blind on purpose: a name read anywhere must be bound
somewhere in the file (an import, a def, a parameter, an assignment, a loop or comprehension
target) or be a builtin. That is loose enough for every file the writers produce and still
catches what a jaxpr rendered into source can leave behind: a function of the shape language
(`floordiv(D1, 512)`), or an `np.<name>` numpy does not have (`np.bfloat16`).
"""

from __future__ import annotations

import ast
import builtins

import numpy as np

from agents.llm.base import ProviderError
from kernelgraph import pyast

_MODULE_ROOTS = {"np": np}  # attribute reads on these modules must exist (np.bfloat16 does not)
_BUILTINS = frozenset(dir(builtins))


def _names(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """The names `tree` binds, the names it reads, and its `np.<attr>` reads numpy lacks, in
    one walk of the tree (the planner checks hundreds of rendered kernels a plan)."""
    bound: set[str] = set()
    read: set[str] = set()
    missing: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Attribute):
            root = node.value
            if (isinstance(root, ast.Name) and root.id in _MODULE_ROOTS
                    and not hasattr(_MODULE_ROOTS[root.id], node.attr)):
                missing.add(f"{root.id}.{node.attr}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read, missing


def checked_source(code: str, what: str = "the candidate") -> str:
    """`code` unchanged when it compiles and every name it reads is defined; else the refusal."""
    try:
        tree = pyast.parse(code)
        pyast.compile_tree(tree, "<candidate>")
    except SyntaxError as exc:
        raise ProviderError(f"unsupported: the offline author wrote {what} that does not parse "
                            f"(line {exc.lineno}: {exc.msg}: {(exc.text or '').strip()[:120]!r})"
                            ) from None
    bound, read, attributes = _names(tree)
    missing = sorted(read - bound - _BUILTINS) + sorted(attributes)
    if missing:
        raise ProviderError(f"unsupported: the offline author wrote {what} reading undefined "
                            f"names: {', '.join(missing)}")
    return code
