"""A JAXBench file's fixed PRNG seeds, folded with the suite seed, for that file alone.

JAXBench input makers draw from fixed keys (`jax.random.PRNGKey(42)`), so every suite seed
would get the same inputs. The file's own view of `jax.random` (its `jax`, a `random` it
imported, or `PRNGKey` / `key` imported by name) is replaced, at import, by one whose key
makers add `SEED_STRIDE * seed` to the literal seed, where `seed` is the suite seed of the
call in progress on this thread (`folded_seeds`). Seed 0 leaves the keys unchanged, so the
tuning inputs are the file's own.

Nothing outside the file changes: patching `jax.random` itself would reach every thread of
the process (another run's input maker, a kernelgraph task's `make_inputs`) while one
suite is built, which is how a determinism check once saw two different inputs.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

__all__ = ["SEED_STRIDE", "fold_seeds_of", "folded_seeds"]

SEED_STRIDE = 7919
KEY_MAKERS = ("PRNGKey", "key")

_suite_seed: contextvars.ContextVar[int] = contextvars.ContextVar("kernelgraph_suite_seed",
                                                                   default=0)


@contextlib.contextmanager
def folded_seeds(seed: int) -> Iterator[None]:
    """Within this block, on this thread, a folded file's key makers add the suite seed."""
    token = _suite_seed.set(seed)
    try:
        yield
    finally:
        _suite_seed.reset(token)


def _folding(original: Callable[..., Any]) -> Callable[..., Any]:
    def make(seed: Any, *args: Any, **kwargs: Any) -> Any:
        suite_seed = _suite_seed.get()
        if suite_seed:
            seed = int(seed) + SEED_STRIDE * suite_seed
        return original(seed, *args, **kwargs)

    make.__name__ = getattr(original, "__name__", "key")
    make.__doc__ = original.__doc__
    return make


class _View:
    """A module seen through some replaced attributes; the rest is the module's own."""

    def __init__(self, target: ModuleType, replaced: dict[str, Any]) -> None:
        self.__target = target
        self.__replaced = replaced

    def __getattr__(self, name: str) -> Any:
        if name in self.__replaced:
            return self.__replaced[name]
        return getattr(self.__target, name)

    def __repr__(self) -> str:
        return f"<{self.__target.__name__}, its key makers folded with the suite seed>"


def fold_seeds_of(module: ModuleType) -> None:
    """Give `module` (a JAXBench file, just imported) folded key makers of its own."""
    import jax
    import jax.random as jax_random

    makers = {name: _folding(getattr(jax_random, name)) for name in KEY_MAKERS}
    random_view = _View(jax_random, makers)
    jax_view = _View(jax, {"random": random_view})
    for name, value in list(vars(module).items()):
        if value is jax:
            setattr(module, name, jax_view)
        elif value is jax_random:
            setattr(module, name, random_view)
        else:
            for maker in KEY_MAKERS:
                if value is getattr(jax_random, maker):
                    setattr(module, name, makers[maker])
