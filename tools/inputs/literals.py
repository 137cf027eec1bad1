"""Sizes written as literals in a JAXBench ``create_inputs``, read from ``CONFIG`` instead.

The fused-operator tasks of JAXBench state their sizes in ``CONFIG`` but build their inputs
from literals (``x = jax.random.uniform(key, (4096, 8192))``), so scaling ``CONFIG`` changes
nothing and every derived shape is the tuning shape again. Here each integer literal of at
least ``MIN_SIZE`` in ``create_inputs`` becomes a read of a ``CONFIG`` entry: the entry
with that value when there is one (``batch_size``), else a new entry ``literal_<value>``.
The same literals in ``workload`` follow the same entries, so a workload that reshapes by
a size keeps agreeing with its inputs. At the original config both functions compute what
they did; which entries then size an input (and which, like a seed, do not) is decided by
:mod:`tools.inputs.scaling` as for any task.

The rewrite happens in the loading process, from the file's own source, so every process
that loads the task (suite, verifier, timing child) binds the same literals the same way.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from kernelgraph import pyast
from tools.inputs.scaling import MIN_SIZE

LITERAL_PREFIX = "literal_"
_FUNCTIONS = ("create_inputs", "workload")


@dataclass(frozen=True)
class Bound:
    config: dict[str, Any]  # CONFIG with the new literal_<value> entries
    functions: dict[str, FunctionType]  # the rewritten create_inputs (and workload)
    entries: tuple[str, ...]  # the CONFIG entries that literals now read, in order


class _Binder(ast.NodeTransformer):
    def __init__(self, names: dict[int, str], create: bool) -> None:
        self.names = names
        self.create = create  # create_inputs may add entries; workload only follows them
        self.used: list[str] = []

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if type(value) is not int or value < MIN_SIZE:
            return node
        if value not in self.names:
            if not self.create:
                return node
            self.names[value] = f"{LITERAL_PREFIX}{value}"
        name = self.names[value]
        if name not in self.used:
            self.used.append(name)
        read = ast.Subscript(value=ast.Name(id="CONFIG", ctx=ast.Load()),
                             slice=ast.Constant(value=name), ctx=ast.Load())
        return ast.copy_location(read, node)


def bind_literal_sizes(module: ModuleType) -> Bound | None:
    """``create_inputs`` and ``workload`` reading their integer literals from ``CONFIG``
    (module doc); None when ``create_inputs`` has no such literal or its source cannot be
    rewritten (decorated, a lambda, not found)."""
    config = dict(module.CONFIG)
    names: dict[int, str] = {}
    for key, value in config.items():
        if type(value) is int and value >= MIN_SIZE:
            names.setdefault(value, key)
    functions: dict[str, FunctionType] = {}
    used: list[str] = []
    for name in _FUNCTIONS:
        tree = _function_tree(getattr(module, name, None))
        if tree is None:
            if name == "create_inputs":
                return None
            continue
        binder = _Binder(names, create=name == "create_inputs")
        tree = ast.fix_missing_locations(binder.visit(tree))
        if not binder.used:
            if name == "create_inputs":
                return None
            continue
        namespace: dict[str, Any] = {}
        code = pyast.compile_tree(ast.Module(body=[tree.body[0]], type_ignores=[]),
                                  inspect.getsourcefile(module) or "<task>")
        exec(code, module.__dict__, namespace)
        functions[name] = namespace[name]
        used += [u for u in binder.used if u not in used]
    for value, key in names.items():
        config.setdefault(key, value)
    return Bound(config=config, functions=functions, entries=tuple(used))


def _function_tree(function: Any) -> ast.Module | None:
    if not isinstance(function, FunctionType):
        return None
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    try:
        tree = pyast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef) or definition.decorator_list:
        return None
    ast.increment_lineno(tree, first - 1)  # tracebacks name the file's own lines
    return tree


def apply(module: ModuleType, bound: Bound) -> None:
    """Installs the rewritten functions and the extended CONFIG on ``module``."""
    module.CONFIG = dict(bound.config)
    for name, function in bound.functions.items():
        setattr(module, name, function)
