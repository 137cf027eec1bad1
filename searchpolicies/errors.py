"""The errors of the search policies: a bad name, a bad parameter, a broken policy."""

from __future__ import annotations

from kernelgraph.errors import KernelgraphError


class PolicyError(KernelgraphError, ValueError):
    """A policy, its parameters or the lever catalogue were refused, with the reason."""


class UnknownPolicyError(PolicyError, LookupError):
    """No built-in or installed policy has this name."""
