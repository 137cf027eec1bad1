"""Policies by name: the built-ins, the `kernelgraph.search_policies` entry points, `module:Class`.

Another package adds a policy by declaring, in its pyproject.toml,

    [project.entry-points."kernelgraph.search_policies"]
    mypolicy = "my_package.module:MyPolicy"

after which `--policy mypolicy` finds it. The entry point's name must be the class's `name`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Mapping

from searchpolicies.base import SearchPolicy
from searchpolicies.errors import PolicyError, UnknownPolicyError

GROUP = "kernelgraph.search_policies"

BUILTIN: dict[str, str] = {
    "parallel": "searchpolicies.parallel:ParallelPolicy",
    "beam": "searchpolicies.beam:BeamPolicy",
    "greedy": "searchpolicies.greedy:GreedyPolicy",
    "evolutionary": "searchpolicies.evolutionary:EvolutionaryPolicy",
    "adaptive": "searchpolicies.adaptive:AdaptivePolicy",
}
"""Also declared as entry points in pyproject.toml; listed here so a checkout whose installed
metadata predates them still finds them. A plug-in cannot replace a built-in."""


def _load(spec: str, name: str | None = None) -> type[SearchPolicy]:
    module_name, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"search policy {spec!r} cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, SearchPolicy)):
        raise PolicyError(f"{spec} is not a SearchPolicy subclass")
    if name is not None and getattr(cls, "name", None) != name:
        raise PolicyError(f"entry point {name!r} loads {spec}, whose name is "
                          f"{getattr(cls, 'name', None)!r}")
    return cls


def _entry_points() -> dict[str, str]:
    found: dict[str, str] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def policy_names() -> list[str]:
    """Every name `--policy` accepts: built-ins and installed plug-ins."""
    return sorted({*BUILTIN, *_entry_points()})


def policy_class(name: str) -> type[SearchPolicy]:
    """A built-in, an installed entry point, or `module:Class`."""
    if name in BUILTIN:
        return _load(BUILTIN[name], name)
    if ":" in name:
        return _load(name)
    plugins = _entry_points()
    if name in plugins:
        return _load(plugins[name], name)
    raise UnknownPolicyError(f"unknown search policy {name!r}; known: {', '.join(policy_names())}")


def parse_param_args(items: Iterable[str]) -> dict[str, str]:
    """`--param key=value` arguments as a dict; a malformed or repeated one is refused."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PolicyError(f"--param expects key=value, got {item!r}")
        if key in out:
            raise PolicyError(f"--param {key} given twice")
        out[key] = value
    return out


def get_policy(name: str, params: Mapping[str, str] | None = None, *,
               seed: int = 0) -> SearchPolicy:
    """The policy `name`, built from `--param` strings."""
    return policy_class(name).from_params(dict(params or {}), seed=seed)
