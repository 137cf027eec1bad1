"""The `kernelgraph` command line: one module per group of commands, all on one app."""

from __future__ import annotations

import importlib
import os
import warnings

# The command's own process lowers, prices and judges on the host: devices are used only by
# the sandboxed timing child, which names its platform itself. Without this, a machine with
# libtpu installed (the tpu-compiler extra) but no TPU attached prints libtpu's failed
# initialisation on every command. A user's own JAX_PLATFORMS is kept.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from kernelgraph.cli.app import app
from tools import compilecache

# Each module attaches its commands to `app` when imported.
COMMAND_MODULES = (
    "kernelgraph.cli.logcmds",
    "kernelgraph.cli.auditcmds",
    "kernelgraph.cli.buscmds",
    "kernelgraph.cli.perfcmds",
    "kernelgraph.cli.estimatecmds",
    "kernelgraph.cli.verifycmds",
    "kernelgraph.cli.runcmds",
    "kernelgraph.cli.resumecmds",
    "kernelgraph.cli.benchcmds",
    "kernelgraph.cli.hitlcmds",
    "kernelgraph.cli.knowledgecmds",
    "kernelgraph.cli.reportcmds",
    "kernelgraph.cli.taskcmds",
    "kernelgraph.cli.policycmds",
    "kernelgraph.cli.doctorcmds",
)


def load_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    # Sandboxed children are started by fork + exec at once, which JAX's warning is not about.
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    # Before any command compiles: the suite, the reference and the baseline compile the same
    # XLA programs on every run (the sandboxed children never use it).
    compilecache.enable()
    load_commands()
    app()


__all__ = ["app", "load_commands", "main"]
