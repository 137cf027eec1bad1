"""Search policies over the `SearchGraph`: the base, the budget, the built-ins and plug-ins.

`SearchPolicy` (base.py) states the contract; `registry.get_policy(name, params, seed=)`
builds one by name; `testing.PolicyContract` is the suite every policy must pass.
"""

from __future__ import annotations

from searchpolicies.base import Budget, Decision, Expand, Param, SearchPolicy, Stop
from searchpolicies.errors import PolicyError, UnknownPolicyError
from searchpolicies.registry import get_policy, parse_param_args, policy_class, policy_names

__all__ = [
    "Budget",
    "Decision",
    "Expand",
    "Param",
    "PolicyError",
    "SearchPolicy",
    "Stop",
    "UnknownPolicyError",
    "get_policy",
    "parse_param_args",
    "policy_class",
    "policy_names",
]
