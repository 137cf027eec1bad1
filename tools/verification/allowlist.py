"""Which traced programs the verifier accepts: what runs must be what is audited and priced.

Correctness runs the trace under TPU interpret mode on the CPU; the compile check, the
audit and the cost model read the same trace lowered by Mosaic. Both only describe one
program when every primitive computes the same thing under both. So:

- No platform-dependent choice anywhere (``platform_index``, a ``cond`` with platform
  branches, as ``jax.lax.platform_dependent`` makes): interpret mode takes the default
  branch, Mosaic the ``mosaic``/``tpu`` one.
- No host callbacks anywhere: their Python runs on the host under interpret mode only.
- Inside kernel bodies and index maps, only primitives on :data:`KERNEL_PRIMITIVES`, whose
  Mosaic lowering computes what interpret mode computes (elementwise math, reductions,
  layout, control flow, refs, DMAs and semaphores). Anything else fails closed with its
  name: a hardware PRNG draws other bits than the interpreter, an approximate reciprocal
  other values, an unknown primitive anything.

Outside the kernels the lowered-text audit (:mod:`tools.lowered.audit`) admits layout only.
"""

from __future__ import annotations

from typing import Any

from tools import jaxprivate

KERNEL_PRIMITIVES = frozenset({
    # elementwise math and comparisons
    "abs", "add", "add_any", "and", "atan2", "ceil", "clamp", "clz", "cos", "div", "eq",
    "erf", "erf_inv", "exp", "exp2", "floor", "ge", "gt", "integer_pow", "is_finite", "le",
    "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not",
    "or", "population_count", "pow", "reciprocal", "rem", "round", "rsqrt", "select_n",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sin", "sqrt",
    "square", "sub", "tan", "tanh", "xor", "stop_gradient",
    # types, layout, reductions, matmul
    "bitcast", "bitcast_convert_type", "broadcast_in_dim", "broadcast_to", "concatenate",
    "convert_element_type", "dot_general", "gather", "iota", "pad", "reshape", "roll",
    "slice", "split", "squeeze", "stack", "tile", "transpose", "unstack", "argmax", "argmin",
    "reduce_and", "reduce_max", "reduce_min", "reduce_or", "reduce_sum",
    # control flow and calls
    "cond", "while", "scan", "jit", "pjit", "closed_call", "custom_jvp_call",
    "custom_vjp_call", "run_scoped",
    # refs, grid, memory movement, synchronisation
    "get", "swap", "addupdate", "masked_load", "masked_swap", "empty_ref", "program_id",
    "num_programs", "axis_index", "multiple_of", "dma_start", "dma_wait",
    "get_barrier_semaphore", "semaphore_read", "semaphore_signal", "semaphore_wait",
    "delay", "debug_print",
})
# Anywhere in the program: each runs host Python under interpret mode only.
_CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback", "callback"})
_WHY_NOT = {
    "prng_seed": "the TPU hardware PRNG draws other bits than the interpreter",
    "prng_random_bits": "the TPU hardware PRNG draws other bits than the interpreter",
    "stochastic_round": "stochastic rounding draws other bits on the TPU than the interpreter",
    "platform_index": "it chooses code by platform",
}


def program_problems(closed_jaxpr: Any) -> list[str]:
    """Why this traced program cannot be verified by running it under interpret mode (empty
    when it can): platform choices, callbacks, kernel primitives not on the allowlist."""
    problems: list[str] = []
    _walk(closed_jaxpr, kernel=None, problems=problems, seen=set())
    return problems


def _walk(value: Any, kernel: str | None, problems: list[str], seen: set[int]) -> None:
    core = jaxprivate.core()
    if isinstance(value, core.ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, core.Jaxpr):
        if id(value) in seen:
            return
        seen.add(id(value))
        for eqn in value.eqns:
            _check(eqn, kernel, problems)
            inner = kernel
            if eqn.primitive.name == "pallas_call" and kernel is None:
                inner = _kernel_name(eqn)
            for param in eqn.params.values():
                _walk(param, inner, problems, seen)
    elif isinstance(value, tuple | list):
        for item in value:
            _walk(item, kernel, problems, seen)
    elif hasattr(value, "block_mappings"):  # a pallas GridMapping: index maps run in Mosaic
        for mapping in value.block_mappings:
            _walk(mapping.index_map_jaxpr, kernel or "an index map", problems, seen)


def _check(eqn: Any, kernel: str | None, problems: list[str]) -> None:
    name = eqn.primitive.name
    where = f"in the body of kernel `{kernel}`" if kernel else "outside the kernels"
    problem = ""
    if name == "platform_index" or (name == "cond" and _platform_branches(eqn)):
        problem = (f"platform-dependent code ({where}): `{name}` chooses a branch by platform, "
                   "so interpret mode runs one branch while the Mosaic program that is "
                   "compile-checked, audited and priced takes another "
                   "(jax.lax.platform_dependent is not allowed)")
    elif name in _CALLBACKS:
        problem = (f"a host callback `{name}` ({where}): its Python runs under interpret mode "
                   "only, never in the Mosaic program")
    elif kernel is not None and name not in KERNEL_PRIMITIVES:
        why = _WHY_NOT.get(name, "it is not on the verifier's list of primitives whose Mosaic "
                                 "lowering computes what interpret mode computes")
        problem = f"primitive `{name}` {where} is not allowed: {why}"
    elif kernel is not None and name == "reciprocal" and eqn.params.get("approx"):
        problem = (f"`reciprocal(approx=True)` {where}: the TPU's approximate reciprocal "
                   "computes other values than the interpreter's exact one")
    if problem and problem not in problems:
        problems.append(problem)


def _platform_branches(eqn: Any) -> bool:
    platforms = eqn.params.get("branches_platforms")
    return bool(platforms) and any(p is not None for p in platforms)


def _kernel_name(eqn: Any) -> str:
    info = eqn.params.get("name_and_src_info")
    name = getattr(info, "name", None) or eqn.params.get("name")
    if name:
        return str(name)
    body = eqn.params.get("jaxpr")
    debug = getattr(body, "debug_info", None)
    return str(getattr(debug, "func_name", None) or "pallas_call")
