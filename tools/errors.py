"""Errors about user files: each names the file and the problem, never a traceback."""

from __future__ import annotations

from pathlib import Path


class FileProblem(ValueError):
    """A file that cannot be used, with the file and the problem in the message."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")
