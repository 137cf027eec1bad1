"""The `kernelgraph` command's entry point: the process tuned first, then the command line."""

from __future__ import annotations


def main() -> None:
    from tools import allocator

    allocator.reexec_tuned()  # before the command line is imported: nothing loaded is lost
    from kernelgraph.cli import main as command_line

    command_line()
