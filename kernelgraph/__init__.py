"""kernelgraph: reference JAX function in, verified faster Pallas kernel out."""

from __future__ import annotations

__version__ = "0.1.0"
