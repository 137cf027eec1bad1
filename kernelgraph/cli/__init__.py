"""The `kernelgraph` command line: one module per group of commands, all on one app."""

from __future__ import annotations

import importlib

from kernelgraph.cli.app import app

# Each module attaches its commands to `app` when imported.
COMMAND_MODULES = (
    "kernelgraph.cli.logcmds",
    "kernelgraph.cli.buscmds",
    "kernelgraph.cli.perfcmds",
    "kernelgraph.cli.verifycmds",
    "kernelgraph.cli.runcmds",
    "kernelgraph.cli.knowledgecmds",
)


def load_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    load_commands()
    app()


__all__ = ["app", "load_commands", "main"]
