"""`python -m kernelgraph` is the `kernelgraph` command."""

from __future__ import annotations

from kernelgraph.cli import main

main()
