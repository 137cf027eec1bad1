"""Import a candidate file and call its ``build``: only ever inside the sandboxed child.

This is the one place candidate code is executed; :mod:`tools.inputs.candidate` reads the
same file statically in the parent.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tools.inputs.candidate import CandidateError


def load_in_child(path: str | Path) -> ModuleType:
    """Import the candidate file. Only ever called inside the sandboxed child process."""
    path = Path(path)
    module_name = "_kernelgraph_candidate"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(path, "cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def build_in_child(module: ModuleType, config: dict[str, Any]) -> Callable[..., Any]:
    """Call ``build(**config)`` and check it returned something callable."""
    kernel = module.build(**config)
    if not callable(kernel):
        raise CandidateError(
            getattr(module, "__file__", "candidate"),
            f"build() returned {type(kernel).__name__}, expected a callable kernel",
        )
    return kernel
