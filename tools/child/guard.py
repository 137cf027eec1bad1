"""Tampering the worker can notice: the evaluation's own functions and JAX's lowering rules,
snapshotted by identity before the candidate is imported and compared after each step.

The candidate runs in the worker's process and could hide any of this; what it reports is
its word and can only fail it (the runner, which never imports the candidate, produces
the lowered text and the outputs). A replaced function, a lowering rule of its own or a
primitive of its own (which could lower one way for TPU and another for interpret mode)
is named in the verdict.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tools import jaxprivate

# Functions a candidate has no business replacing; each is checked by identity.
GUARDED = (
    "numpy.allclose", "numpy.isclose", "numpy.array_equal", "numpy.asarray", "numpy.array",
    "numpy.isfinite", "numpy.abs", "numpy.max", "numpy.mean", "numpy.frombuffer",
    "numpy.testing.assert_allclose", "numpy.testing.assert_array_equal",
    "jax.jit", "jax.device_put", "jax.block_until_ready", "jax.numpy.allclose",
    "jax.numpy.isclose", "jax.numpy.array_equal", "jax.numpy.asarray", "jax.core.eval_jaxpr",
    "jax.stages.Traced.lower", "jax.stages.Lowered.as_text", "jax.stages.Wrapped.trace",
    "jax.experimental.pallas.pallas_call", "jax.experimental.pallas.tpu.InterpretParams",
    "jax.experimental.pallas.tpu.force_tpu_interpret_mode",
    *jaxprivate.GUARDED,
    f"{jaxprivate.PALLAS_PACKAGE}.mosaic.interpret.utils.get_uninitialized_value",
    "tools.child.worker.with_second_poison", "tools.child.worker.run_eager",
    "tools.child.watchdog.phase", "tools.child.watchdog.Watchdog.phase",
    "tools.child.watchdog.Watchdog._watch", "tools.child.watchdog.Watchdog._expire",
    "hashlib.sha256", "msgspec.msgpack.encode", "builtins.open",
    "tools.sandbox.wire.WireArray.of", "tools.sandbox.wire.hash_arrays",
    "tools.sandbox.wire.contiguous",
    "tools.sandbox.wire.encode", "tools.child.interpret.interpreted", "tools.child.interpret._eval",
    "tools.jaxpreval.evaluate", "tools.jaxpreval.inner",
    "tools.child.interpret.RaceLog.races_since", "tools.child.worker.run_group",
    "tools.verification.allowlist.program_problems", "tools.verification.allowlist._check",
    "tools.child.worker.run_case", "tools.child.guard.IntegrityGuard.changed",
    "tools.child.guard.lowering_rules",
)


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return getattr(obj, "__func__", obj)  # a bound classmethod is new on every access
    raise ImportError(dotted)


class IntegrityGuard:
    """Identity snapshot of :data:`GUARDED`; :meth:`changed` names what was replaced."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        for name in GUARDED:
            try:
                self._ids[name] = id(_resolve(name))
            except (ImportError, AttributeError):
                continue
        self._modules = {name: id(sys.modules[name]) for name in
                         ("numpy", "jax", "jax.numpy", "hashlib", "msgspec", "tools.sandbox.wire",
                          "tools.child.interpret", "tools.child.worker", "tools.child.guard",
                          "tools.jaxpreval")
                         if name in sys.modules}
        self._rules = lowering_rules()
        self._known_primitives = {key[2] for key in self._rules}

    def new_primitives(self, used: set[Any]) -> list[str]:
        """Primitives of the traced program whose lowering did not exist before the candidate
        ran: a primitive of its own can lower one way for TPU (what is audited and modelled)
        and another for the CPU interpreter (what is run and compared)."""
        return sorted({f"the lowering of primitive `{p.name}` (defined by the candidate)"
                       for p in used if p not in self._known_primitives})

    def changed(self) -> list[str]:
        found = []
        rules = lowering_rules()
        for key, ident in self._rules.items():
            if rules.get(key) != ident:
                found.append(_rule_name(key))
        for key in rules.keys() - self._rules.keys():
            if key[2] in self._known_primitives:  # a new platform-specific override
                found.append(_rule_name(key))
        for name, ident in self._ids.items():
            try:
                now = id(_resolve(name))
            except (ImportError, AttributeError):
                now = -1
            if now != ident:
                found.append(name)
        for name, ident in self._modules.items():
            if id(sys.modules.get(name)) != ident:
                found.append(f"sys.modules[{name!r}]")
        return found


def lowering_rules() -> dict[tuple[str, str, Any], int]:
    """(table, platform, primitive) -> id of its rule, for every lowering JAX dispatches on:
    MLIR lowerings (generic and per platform), Mosaic kernel-body lowerings, and each
    primitive's own ``impl`` (what eager interpretation of a kernel body binds)."""
    mlir = jaxprivate.jax_mlir()
    mosaic_lowering = jaxprivate.mosaic_lowering()
    rules: dict[tuple[str, str, Any], int] = {}
    for prim, entry in list(mlir._lowerings.items()):
        rules[("mlir", "any", prim)] = id(entry)
        impl = vars(prim).get("impl")
        if impl is not None:
            rules[("impl", "any", prim)] = id(impl)
    for platform, table in list(mlir._platform_specific_lowerings.items()):
        for prim, entry in list(table.items()):
            rules[("mlir", platform, prim)] = id(entry)
    for kind, table in list(mosaic_lowering.lowering_rules.items()):
        for prim, rule in list(table.items()):
            rules[("mosaic", str(kind), prim)] = id(rule)
    return rules


def _rule_name(key: tuple[str, str, Any]) -> str:
    table, platform, prim = key
    return f"the {table} lowering rule of `{getattr(prim, 'name', prim)}` ({platform})"


def primitives_of(closed_jaxpr: Any) -> set[Any]:
    """Every primitive of a program: nested jaxprs, kernel bodies and index maps included."""
    core = jaxprivate.core()
    found: set[Any] = set()
    seen: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, core.ClosedJaxpr):
            value = value.jaxpr
        if isinstance(value, core.Jaxpr):
            if id(value) in seen:
                return
            seen.add(id(value))
            for eqn in value.eqns:
                found.add(eqn.primitive)
                for param in eqn.params.values():
                    visit(param)
        elif isinstance(value, tuple | list):
            for item in value:
                visit(item)
        elif hasattr(value, "block_mappings"):  # a pallas GridMapping
            for mapping in value.block_mappings:
                visit(mapping.index_map_jaxpr)

    visit(closed_jaxpr)
    return found
