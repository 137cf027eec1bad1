"""`python -m kernelgraph` is the `kernelgraph` command."""

from __future__ import annotations

from kernelgraph.cli import main

if __name__ == "__main__":  # a spawned worker (bench's task checks) imports this module again
    main()
