"""Interpret mode's host callbacks get their arguments as the host arrays they arrive as.

Under TPU interpret mode every memory access of a kernel (a ref read or write, a DMA start
or wait, a semaphore, a buffer's allocation) is an `io_callback` from the compiled program
into Python. JAX's implementation first puts each argument on the CPU device as a
`jax.Array`, and the interpreter's functions turn them straight back into host values
(`int(...)`, `np.asarray`): on a kernel that makes many small accesses that round trip is
most of its run (`benchmarks/interpret_callbacks.py`). Here the interpreter's own callbacks,
and the children's wrappers of them that count transfers and branches
(:mod:`tools.child.interpret`, :mod:`tools.child.branches`), get NumPy copies of their
arguments (copies: the program's buffers are valid only during the call), under the same
default device; every other callback goes through JAX's implementation unchanged. The
callbacks, their order and the values they see are the same, so what a kernel computes is
too. Installed by the children before any program runs and, in the worker, before the
candidate is imported (the guard names a later replacement).
"""

from __future__ import annotations

from typing import Any

from tools import jaxprivate

# Whose callbacks take host arguments: JAX's interpreter and the children's wrappers of it.
INTERPRETER_MODULES = ("tools.child.interpret", "tools.child.branches")


def is_interpreter_callback(callback: Any) -> bool:
    """Whether the `_FlatCallback` calls a function of JAX's TPU interpreter, or one of the
    children's wrappers of them (through any `functools.partial`)."""
    function = getattr(callback, "callback_func", None)
    while hasattr(function, "func"):
        function = function.func
    module = getattr(function, "__module__", None) or ""
    return (module in INTERPRETER_MODULES or module == jaxprivate.INTERPRET_PACKAGE
            or module.startswith(jaxprivate.INTERPRET_PACKAGE + "."))


def install() -> None:
    """Replace `io_callback`'s implementation (once): the interpreter's callbacks get host
    copies, every other one JAX's own path."""
    import numpy as np

    module = jaxprivate.callback()
    original = module.io_callback_impl
    if getattr(original, "host_arguments", False):
        return
    config, backends, tree_map = module.config, module.xb, module.tree_util.tree_map

    def io_callback_impl(*args: Any, callback: Any, **params: Any) -> Any:
        if not is_interpreter_callback(callback):
            return original(*args, callback=callback, **params)
        cpu_device = backends.local_devices(backend="cpu")[0]
        copies = [np.array(arg, copy=True) for arg in args]
        with config.default_device(cpu_device):
            return tree_map(np.asarray, callback(*copies))

    io_callback_impl.host_arguments = True  # type: ignore[attr-defined]
    module.io_callback_impl = io_callback_impl
