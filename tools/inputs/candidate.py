"""Candidate kernel files, read statically: nothing here runs the candidate's code.

A candidate defines ``build(**knobs)`` returning a callable with the reference's signature,
and optionally ``TUNABLES = {"knob": [default, alternative, ...]}``. The parent never
imports candidate code: :func:`read_candidate` parses the file with :mod:`ast` and reads
``TUNABLES`` with :func:`ast.literal_eval`. Importing the file and calling ``build`` is
:mod:`tools.child.loader`'s job, in the sandboxed child only.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgraph import pyast
from tools.inputs.files import FileProblem, read_python_source


class CandidateError(FileProblem):
    """A candidate kernel file that cannot be used."""


@dataclass(frozen=True)
class CandidateSource:
    """A candidate file as text plus what can be known about it without running it."""

    path: Path
    text: str
    sha256: str
    tunables: dict[str, list[Any]]
    build_params: tuple[str, ...]
    build_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def default_config(self) -> dict[str, Any]:
        return {name: values[0] for name, values in self.tunables.items()}

    def configs(self) -> Iterator[dict[str, Any]]:
        """Every configuration of the TUNABLES grid, the default first."""
        names = list(self.tunables)
        for combo in itertools.product(*(self.tunables[n] for n in names)):
            yield dict(zip(names, combo, strict=True))

    @property
    def num_configs(self) -> int:
        count = 1
        for values in self.tunables.values():
            count *= len(values)
        return count

    def check_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The full keyword set for ``build``: defaults overlaid with ``config``."""
        unknown = sorted(set(config) - set(self.build_params))
        if unknown and not self._build_takes_kwargs:
            raise CandidateError(
                self.path, f"config names {unknown} that build() does not accept"
                f" (it takes {list(self.build_params)})"
            )
        return {**self.default_config, **config}

    @property
    def _build_takes_kwargs(self) -> bool:
        return "**" in self.build_params


def read_candidate(path: str | Path) -> CandidateSource:
    """Parse a candidate file without executing it."""
    path = Path(path)
    raw, text = read_python_source(path, CandidateError)
    try:
        tree = pyast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise CandidateError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    build = _find_build(path, tree)
    params, defaults = _signature(path, build)
    tunables = _find_tunables(path, tree)
    for name in tunables:
        if name not in params and "**" not in params:
            raise CandidateError(
                path, f"TUNABLES names `{name}` but build() has no parameter of that name"
            )
    return CandidateSource(
        path=path,
        text=text,
        sha256=hashlib.sha256(raw).hexdigest(),
        tunables=tunables,
        build_params=params,
        build_defaults=defaults,
    )


def _find_build(path: Path, tree: ast.Module) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "build":
            return node
    raise CandidateError(
        path, "missing function `build` (a candidate defines build(**knobs) -> kernel callable)"
    )


def _signature(path: Path, build: ast.FunctionDef) -> tuple[tuple[str, ...], dict[str, Any]]:
    args = build.args
    positional = [*args.posonlyargs, *args.args]
    names = [a.arg for a in positional] + [a.arg for a in args.kwonlyargs]
    defaults: dict[str, Any] = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults,
                            strict=True):
        defaults[arg.arg] = _literal_or_marker(default)
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if kw_default is not None:
            defaults[arg.arg] = _literal_or_marker(kw_default)
    required = [a.arg for a in positional[: len(positional) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                 if d is None]
    if required:
        raise CandidateError(
            path, f"build() parameters {required} need defaults (the default config must build)"
        )
    if args.vararg is not None:
        raise CandidateError(path, "build() must not take *args; tuning knobs are keywords")
    if args.kwarg is not None:
        names.append("**")
    return tuple(names), defaults


def _literal_or_marker(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return f"<{ast.unparse(node)}>"


def _find_tunables(path: Path, tree: ast.Module) -> dict[str, list[Any]]:
    found: ast.expr | None = None
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
            value = node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
            value = node.value
        if any(isinstance(t, ast.Name) and t.id == "TUNABLES" for t in targets):
            found = value
    if found is None:
        return {}
    try:
        tunables = ast.literal_eval(found)
    except ValueError:
        raise CandidateError(
            path, f"TUNABLES must be a literal dict (line {found.lineno}); it is read "
            "without running the file"
        ) from None
    if not isinstance(tunables, dict):
        raise CandidateError(path, "TUNABLES must be a dict of name -> list of values")
    checked: dict[str, list[Any]] = {}
    for name, values in tunables.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise CandidateError(path, f"TUNABLES key {name!r} is not a parameter name")
        if not isinstance(values, list | tuple) or not values:
            raise CandidateError(
                path, f"TUNABLES[{name!r}] must be a non-empty list (first = default)"
            )
        if len(set(map(repr, values))) != len(values):
            raise CandidateError(path, f"TUNABLES[{name!r}] repeats a value: {values!r}")
        checked[name] = list(values)
    return checked
