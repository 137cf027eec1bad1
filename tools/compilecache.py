"""JAX's persistent compilation cache, for the trusted processes only.

Freezing a suite, timing the reference, pricing the XLA baseline and judging outputs each
compile small XLA programs for the host CPU, and most of them are the same from one
candidate, one run and one process to the next: on a small task the compiles are most of
the parent's CPU time. :func:`enable` points JAX's persistent cache at a folder of this
user's (``~/.cache/kernelgraph/xla``, or :data:`CACHE_ENV`; ``off`` turns it off), one
subfolder per host CPU and jaxlib, since an executable is compiled for the CPU it was built
on. Every compile is kept, however short: the short ones are the many.

JAX treats the cache as trusted: whoever can write to it can run code in every process that
reads it. So only the processes that never run candidate code use it (the command line,
its agents, the test session); the sandboxed children never do: the launcher removes any
cache setting from their environment and turns the cache off there
(:func:`tools.sandbox.launcher.scrubbed_env`), so a candidate can neither plant an
executable nor read one. Entries are read and written under a file lock (JAX's, with a
size limit), so processes that share the folder never read a half-written entry.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

CACHE_ENV = "KG_XLA_CACHE"
OFF_VALUES = frozenset({"off", "0", "none", "false"})
MAX_BYTES = 2 << 30  # least recently used entries go first past this

# The names under which JAX reads its cache settings from the environment; a child's
# environment never carries them (tools.sandbox.launcher).
JAX_CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE",
                       "JAX_COMPILATION_CACHE_MAX_SIZE",
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
                       "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES")


def cache_root() -> Path | None:
    """The folder of every host's caches, or None when :data:`CACHE_ENV` turns it off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None and value.strip().lower() in OFF_VALUES:
        return None
    return Path(value) if value else Path.home() / ".cache" / "kernelgraph" / "xla"


def host_key() -> str:
    """This host's CPU (model and feature flags) and jaxlib: an executable built for one
    is not loaded on another."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            lines = [line for line in info if line.startswith(("model name", "flags"))]
        cpu += "".join(sorted(set(lines)))
    except OSError:  # not Linux: the platform's own description
        pass
    digest = hashlib.sha256(cpu.encode()).hexdigest()[:16]
    return f"{platform.machine()}-{digest}-jaxlib{metadata.version('jaxlib')}"


def _options(folder: Path) -> dict[str, object]:
    """JAX's cache options for ``folder``; each is also read from the environment, by its
    name in capitals."""
    return {"jax_compilation_cache_dir": str(folder), "jax_enable_compilation_cache": True,
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": 0,
            "jax_compilation_cache_max_size": MAX_BYTES}


def enable() -> Path | None:
    """Point JAX's persistent cache at this host's folder; the folder, or None when the cache
    is off or cannot be made (then every program is compiled, as without it).

    Before JAX is imported this only sets the environment JAX reads its settings from, so a
    command that never compiles does not pay for importing it, and a cache folder the user
    gave JAX themselves (``JAX_COMPILATION_CACHE_DIR``) is kept. After, it updates JAX's
    settings; it is safe to call more than once and after compiles have happened."""
    root = cache_root()
    if root is None:
        return None
    if "jax" not in sys.modules and os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    folder = root / host_key()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    options = _options(folder)
    if "jax" not in sys.modules:
        os.environ.update({name.upper(): str(value).lower() if isinstance(value, bool) else str(value)
                           for name, value in options.items()})
        return folder
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir == str(folder):
        return folder
    for name, value in options.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()  # a compile before this call decided "no cache"
    return folder
