"""Python ASTs built and compiled under one lock, so threads can parse at the same time.

CPython (seen on 3.11.7) converts between its C syntax trees and `ast` objects with a
recursion counter kept per interpreter, not per thread: two threads parsing at once can
fail with "SystemError: AST constructor recursion depth mismatch". Agents run evaluator
work in threads (`AgentContext.run_tool`), and a failed parse there fails a candidate for
nothing it did, so every `ast` object the project makes or compiles goes through here.
"""

from __future__ import annotations

import ast
import threading
from types import CodeType

__all__ = ["compile_tree", "parse", "parse_expression"]

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` of a module, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    """`ast.parse` of one expression, one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode="eval")


def compile_tree(tree: ast.Module, filename: str) -> CodeType:
    """`compile` of an `ast.Module` to exec, one thread at a time."""
    with _LOCK:
        return compile(tree, filename, "exec")
