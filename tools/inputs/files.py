"""Errors about user files: each names the file and the problem, never a traceback."""

from __future__ import annotations

from pathlib import Path

from kernelgraph.errors import KernelgraphError


class FileProblem(KernelgraphError, ValueError):
    """A file that cannot be used, with the file and the problem in the message."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def read_python_source(path: Path, error: type[FileProblem]) -> tuple[bytes, str]:
    """A user's Python file as bytes (for hashing) and text; `error` names what is wrong."""
    if not path.is_file():
        raise error(path, "no such file")
    raw = path.read_bytes()
    try:
        return raw, raw.decode()
    except UnicodeDecodeError:
        raise error(path, "not UTF-8 text") from None
