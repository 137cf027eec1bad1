"""Messages in the user's terms: a task named as the user gave it, no Python class paths.

A run loads its task from copies the user never made: the agents' workspace copy
(`<workspace>/tasks/<sha256>/baseline.py`) and, with `--scale`, the scaled copy
(`<tmp>/kernelgraph-scaled-<uid>/<digest>/<task>/baseline.py`); a shipped task's name
resolves to a file in the package. Errors raised against those files name them, and an
agent's give-up arrives wrapped as `bus.service.PermanentError: ...`. Every command that
prints a refusal passes it through `in_user_terms`, which names the task as it was given
on the command line (the path, the shipped name, the JAXBench folder) and drops the
wrapper's class path and the names of kernelgraph's own errors, so a refusal reads the same
on every surface.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

_STOP = r"\s'\"(),;:"
_WORKSPACE_COPY = re.compile(rf"[^{_STOP}]*/tasks/[0-9a-f]{{64}}/([^{_STOP}/]+)")
_SCALED_COPY = re.compile(
    rf"[^{_STOP}]*/kernelgraph-scaled-\d+/[0-9a-f]{{16}}/(?:([^{_STOP}/]+)/)?([^{_STOP}/]+)")
_WRAPPER = re.compile(r"(?<![\w/.])(?:[A-Za-z_]\w*\.)+PermanentError: ")
_CLASS_PATH = re.compile(r"(?<![\w/.])(?:[a-z_]\w*\.)+([A-Z]\w*)(?=: )")
_CLASS_NAME = re.compile(r"(?<![\w/.])([A-Z]\w*): ")

_GIVEN: dict[str, str] = {}
"""A file the CLI resolved or wrote -> the task as the user gave it."""
_BY_NAME: dict[str, str] = {}
"""A task's folder name or file stem -> the task as the user gave it (for scaled copies)."""
_current: list[str] = []


def label_of(path: Path) -> str:
    """How a task file is named to the user: a JAXBench `baseline.py` by its folder."""
    return str(path.parent) if path.name == "baseline.py" else str(path)


def remember(resolved: Path, given: str, *, current: bool = True) -> None:
    """Name `resolved` (a file the CLI loads in the user's stead) `given` in messages;
    `current`: also the task the run's workspace copy stands for."""
    for key in {str(resolved), str(resolved.absolute())}:
        if key != given:
            _GIVEN[key] = given
    _BY_NAME[resolved.parent.name if resolved.name == "baseline.py" else resolved.stem] = given
    if current:
        _current[:] = [given]


def given_name(path: Path) -> str:
    """The task as the user gave it, for a file the CLI resolved or wrote."""
    return in_user_terms(str(path))


def in_user_terms(message: str, task: str | None = None) -> str:
    """`message` with every copy of a task named as the user gave it (`task`, else the task
    this command was given) and without the agents' wrapper class path."""
    task = task if task is not None else (_current[0] if _current else None)
    text = _WRAPPER.sub("", message)
    text = _CLASS_PATH.sub(r"\1", text)
    own = _own_errors()
    text = _CLASS_NAME.sub(lambda m: "" if m.group(1) in own else m.group(0), text)
    text = _WORKSPACE_COPY.sub(lambda m: task or m.group(1), text)
    text = _SCALED_COPY.sub(lambda m: _scaled_label(m, task), text)
    for key in sorted(_GIVEN, key=len, reverse=True):
        text = text.replace(key, _GIVEN[key])
    return text


def _scaled_label(match: re.Match[str], task: str | None) -> str:
    folder, name = match.group(1), match.group(2)
    stem = folder if name == "baseline.py" and folder else Path(name).stem
    return _BY_NAME.get(stem or "") or task or (folder or name)


def _own_errors() -> frozenset[str]:
    """The names of kernelgraph's own errors: their messages are sentences written for the
    user (a task's problem, a suite too large and the --scale that fits), so the class name
    says nothing more. Another library's or Python's (`ValueError: ...`) stays: it names
    what a reference raised. The refusals a task or a suite gives are always loaded."""
    from kernelgraph.errors import KernelgraphError

    for module in ("tools.correctness.suitedata", "tools.inputs.tasks"):  # SuiteTooLarge, TaskError
        importlib.import_module(module)

    names: set[str] = set()
    todo: list[type] = [KernelgraphError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)
