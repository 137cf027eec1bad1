"""The trust boundaries of the code base, checked on its source with `ast`.

- Only `tools/child/` runs candidate code: nothing else may import `tools.child` or import
  or call `load_in_child` / `build_in_child` (the parent reads candidates statically; a
  child is started by module name through the sandbox, never imported).
- Only `tools/jaxprivate.py` names JAX's private package, so a JAX upgrade is checked
  against one file.
- The error root stays a leaf: `kernelgraph/errors.py` imports nothing of the project.

Each rule is also run on a planted violation, so a rule that can no longer fail is noticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.jaxprivate import PRIVATE_ROOT

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tools", "agents", "bus", "eventstore", "projections", "kernelgraph", "searchpolicies")
CHILD_PACKAGE = "tools.child"
CANDIDATE_RUNNERS = frozenset({"load_in_child", "build_in_child"})
JAXPRIVATE = ROOT / "tools" / "jaxprivate.py"
SKIPPED_DIRS = frozenset({".venv", ".git", "__pycache__", "build", "dist"})


def _python_files(top: Path) -> Iterator[Path]:
    for path in sorted(top.rglob("*.py")):
        if not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def _package_modules() -> list[Path]:
    return [p for package in PACKAGES if (ROOT / package).is_dir()
            for p in _python_files(ROOT / package)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every module and name an import statement brings in."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def child_boundary_violations(path: Path, source: str | None = None) -> list[str]:
    """Where a module outside `tools.child` imports it, or imports or calls a candidate runner."""
    module = _module_name(path)
    if _within(module, CHILD_PACKAGE):
        return []
    where = path.relative_to(ROOT)
    tree = ast.parse(source if source is not None else path.read_text(), filename=str(path))
    found = []
    for line, name in _imported(tree, module, path.name == "__init__.py"):
        if _within(name, CHILD_PACKAGE) or name.rpartition(".")[2] in CANDIDATE_RUNNERS:
            found.append(f"{where}:{line}: imports {name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = (func.id if isinstance(func, ast.Name)
                      else func.attr if isinstance(func, ast.Attribute) else None)
            if called in CANDIDATE_RUNNERS:
                found.append(f"{where}:{node.lineno}: calls {called}()")
    return sorted(set(found))


def private_jax_violations(path: Path, source: str | None = None) -> list[str]:
    """Where a file other than tools/jaxprivate.py imports or names JAX's private package."""
    if path == JAXPRIVATE:
        return []
    where = path.relative_to(ROOT)
    text = source if source is not None else path.read_text()
    tree = ast.parse(text, filename=str(path))
    found = [f"{where}:{line}: imports {name}"
             for line, name in _imported(tree, _module_name(path), path.name == "__init__.py")
             if _within(name, PRIVATE_ROOT)]
    # Text too: a module name handed to importlib, or spelled in a string or a comment.
    found += [f"{where}:{n}: names {PRIVATE_ROOT}"
              for n, line in enumerate(text.splitlines(), 1) if PRIVATE_ROOT in line]
    return sorted(set(found))


def test_only_tools_child_imports_or_runs_candidate_code() -> None:
    modules = _package_modules()
    assert any(_within(_module_name(p), CHILD_PACKAGE) for p in modules)  # the scan sees it
    violations = [v for path in modules for v in child_boundary_violations(path)]
    assert not violations, "candidate code reachable outside tools/child:\n" + "\n".join(violations)


def test_only_jaxprivate_names_the_private_jax_package() -> None:
    files = list(_python_files(ROOT))
    assert JAXPRIVATE in files
    violations = [v for path in files for v in private_jax_violations(path)]
    assert not violations, f"{PRIVATE_ROOT} outside tools/jaxprivate.py:\n" + "\n".join(violations)


def test_the_error_root_is_a_leaf() -> None:
    path = ROOT / "kernelgraph" / "errors.py"
    tree = ast.parse(path.read_text())
    imported = {name for _, name in _imported(tree, "kernelgraph.errors", False)}
    assert imported <= {"__future__", "__future__.annotations"}, imported


@pytest.mark.parametrize("source", [
    "from tools.child.loader import load_in_child\n",
    "from tools.child import worker\n",
    "import tools.child.timing\n",
    "from ..child.loader import build_in_child\n",
    "def f(loader, path):\n    return loader.load_in_child(path)\n",
    "def f(module):\n    return build_in_child(module, {})\n",
])
def test_the_child_rule_finds_a_planted_violation(source: str) -> None:
    planted = ROOT / "tools" / "verification" / "planted.py"
    assert child_boundary_violations(planted, source)
    inside = ROOT / "tools" / "child" / "planted.py"
    assert not child_boundary_violations(inside, source)


@pytest.mark.parametrize("source", [
    f"from {PRIVATE_ROOT} import core\n",
    f"import {PRIVATE_ROOT}.pallas\n",
    f"import importlib\nmlir = importlib.import_module('{PRIVATE_ROOT}.interpreters.mlir')\n",
])
def test_the_private_jax_rule_finds_a_planted_violation(source: str) -> None:
    planted = ROOT / "tools" / "lowered" / "planted.py"
    assert private_jax_violations(planted, source)
    assert not private_jax_violations(JAXPRIVATE, source)
