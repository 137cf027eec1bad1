"""Parsing Python from several threads at once (agents run evaluator work in threads).

CPython keeps the counter it uses to build `ast` objects per interpreter: when a garbage
collection inside one thread's parse lets another thread run and parse, the first fails
with "SystemError: AST constructor recursion depth mismatch" (seen in a JAXBench bench
with two runs at once). A collector callback that yields the GIL makes that likely here.
"""

from __future__ import annotations

import ast
import gc
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelgraph import pyast

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (ROOT / "agents" / "search.py").read_text()
PACKAGES = ("agents", "bus", "eventstore", "kernelgraph", "knowledge", "projections",
            "searchpolicies", "tools")


@pytest.fixture
def collector_that_yields() -> Iterator[None]:
    def yield_gil(phase: str, info: dict[str, int]) -> None:
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.set_threshold(50)
    gc.callbacks.append(yield_gil)
    try:
        yield
    finally:
        gc.callbacks.remove(yield_gil)
        gc.set_threshold(*threshold)


def parse_in_threads(parse: Callable[[str], object], threads: int = 4, each: int = 30) -> list[str]:
    errors: list[str] = []

    def work() -> None:
        for _ in range(each):
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))
                return

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def test_threads_parse_at_once_through_pyast(collector_that_yields: None) -> None:
    assert parse_in_threads(pyast.parse) == []


def test_nothing_else_builds_or_compiles_ast_objects() -> None:
    """Every ast.parse and every compile of a tree goes through `kernelgraph.pyast`."""
    pattern = re.compile(r"\bast\.parse\(|\bcompile\((?!\s*r?[\"'])(?:tree|ast\.)")
    offenders = [f"{path.relative_to(ROOT)}:{n}"
                 for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 if path != ROOT / "kernelgraph" / "pyast.py"
                 for n, line in enumerate(path.read_text().splitlines(), start=1)
                 if pattern.search(line)]
    assert offenders == []


def test_pyast_parses_as_ast_does() -> None:
    assert ast.dump(pyast.parse(SOURCE)) == ast.dump(ast.parse(SOURCE))
    assert ast.dump(pyast.parse_expression("a + 1")) == ast.dump(ast.parse("a + 1", mode="eval"))
