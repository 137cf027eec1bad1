"""Simulated cores under TPU interpret mode compile their per-core program once, not once each.

Interpret mode runs a kernel on several simulated cores by handing the per-core program
(one jaxpr) to a thread per core, and each thread traces, lowers and compiles it from a
closure made fresh for that call: JAX's caches never hit, so two cores cost two identical
compilations, run at the same time. Here the compiled program is kept per jaxpr and
argument types, and the first thread compiles while the others wait for it; every thread
still runs it on its own arguments, so what runs is unchanged. Installed by the children
before any program runs (and, in the worker, before the candidate is imported).
"""

from __future__ import annotations

import threading
from typing import Any

from tools import jaxprivate

_MAX_KEPT = 64  # programs kept per process: a verification compiles a handful


class _Compiled:
    """The compiled per-core programs of this process, by jaxpr and argument types."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def run(self, jaxpr: Any, consts: Any, *args: Any) -> None:
        import jax
        import numpy as np

        def run_core(program: Any, program_consts: Any, *program_args: Any) -> None:
            jaxprivate.core().eval_jaxpr(program, program_consts, *program_args)

        leaves, tree = jax.tree.flatten((consts, args))
        key = (id(jaxpr), tree, tuple((np.shape(x), np.result_type(x).name) for x in leaves))
        with self._lock:  # one compilation; the other cores wait for it, then run
            kept = self._kept.get(key)
            if kept is None:
                if len(self._kept) >= _MAX_KEPT:
                    self._kept.clear()
                compiled = jax.jit(run_core, static_argnums=(0,)).trace(
                    jaxpr, consts, *args).lower().compile()
                kept = self._kept[key] = (jaxpr, compiled)  # the jaxpr kept: its id stays its
        kept[1](consts, *args)


def install() -> None:
    """Replace interpret mode's per-thread compile-and-run with :class:`_Compiled` (once)."""
    module = jaxprivate.interpret_thread_map()
    if getattr(module._run_jaxpr, "compiled_once", False):
        return
    compiled = _Compiled()

    def run_jaxpr(jaxpr: Any, consts: Any, *args: Any) -> None:
        compiled.run(jaxpr, consts, *args)

    run_jaxpr.compiled_once = True  # type: ignore[attr-defined]
    module._run_jaxpr = run_jaxpr
