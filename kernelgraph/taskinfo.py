"""What `kernelgraph tasks` and the task benchmark say about a task: its dtypes, its shapes
and the kernel class the offline author reads from its jaxpr.

Classifying traces the reference and runs it on probes (seconds per task), so the class is
cached per task content, version of the offline author and JAX version in
`$XDG_CACHE_HOME/kernelgraph/tasks` (default `~/.cache/kernelgraph/tasks`). A cache that
cannot be read or written is skipped: the listing is then only slower, never different.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SHORT_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64",
                "int32": "i32", "int8": "i8", "int64": "i64", "bool": "bool"}


@dataclass(frozen=True)
class TaskInfo:
    name: str
    path: str
    summary: str  # the first line of the task's docstring
    inputs: list[str]  # dtype per input, at the tuning point
    outputs: list[str]  # dtype per output
    shapes: list[Any]  # SHAPES as declared, the tuning point first (plus a derived one)
    derived_shapes: list[int] = field(default_factory=list)  # indices added off the tile
    # Per shape, its static arguments as "name=value, ..." ("" for none); [] when the task
    # has none (Python scalars from the input maker: tools.inputs.statics).
    statics: list[str] = field(default_factory=list)
    kernel_class: str | None = None  # None when not classified
    unsupported: str = ""  # why the offline author writes no kernel, when it will not

    @property
    def dtype(self) -> str:
        """`f32,i32 -> f32`: the distinct input dtypes, then the distinct output dtypes."""
        def short(names: list[str]) -> str:
            return ",".join(dict.fromkeys(SHORT_DTYPES.get(n, n) for n in names))

        return f"{short(self.inputs)} -> {short(self.outputs)}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "dtype": self.dtype}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelgraph" / "tasks"


def _author_digest() -> str:
    """sha256 over the offline author's sources and the shape derivation: a changed
    classifier, or a change in which unaligned shapes are derived, invalidates the cache."""
    import agents.llm.offline as offline
    import tools.inputs.shapes as shapes

    digest = hashlib.sha256()
    sources = [*sorted(Path(offline.__file__).parent.glob("*.py")), Path(shapes.__file__)]
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def _read_cache(key: str) -> dict[str, Any] | None:
    try:
        return json.loads((cache_dir() / f"{key}.json").read_text())
    except (OSError, ValueError):  # absent or unreadable: classify again
        return None


def _write_cache(key: str, value: dict[str, Any]) -> None:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        scratch = folder / f".{key}.{os.getpid()}.tmp"
        scratch.write_text(json.dumps(value))
        scratch.replace(folder / f"{key}.json")
    except OSError:  # a read-only home: the listing stays correct, only slower next time
        return


def _statics(task: Any) -> list[str]:
    """Each shape's static arguments in words; the other shapes are traced for theirs only
    when the tuning point has some (a task without them costs no extra trace)."""
    from tools.inputs.statics import describe as describe_statics
    from tools.inputs.statics import parameter_names

    if not task.statics_at(0):
        return []
    fn = task.module.reference if task.format == "kernelgraph" else task.module.workload
    names = parameter_names(fn)
    return [describe_statics(task.statics_at(i), names).removeprefix("static ")
            for i in range(len(task.shapes))]


def describe(path: str | Path, *, classify: bool = True) -> TaskInfo:
    """A task's dtypes and shapes (from its own input maker, traced, not run) and, with
    `classify`, the offline author's kernel class for it (cached)."""
    import jax

    from tools.api import load_task

    task = load_task(path, validate=False)
    inputs = jax.eval_shape(lambda: task.make_inputs(0, 0))
    outputs = jax.tree.leaves(jax.eval_shape(task.reference, *inputs))
    doc = (task.module.__doc__ or "").strip().splitlines()
    info = TaskInfo(name=task.name, path=str(path), summary=doc[0] if doc else "",
                    inputs=[str(x.dtype) for x in inputs], outputs=[str(o.dtype) for o in outputs],
                    shapes=[list(s) if isinstance(s, tuple | list) else s for s in task.shapes],
                    derived_shapes=list(task.derived_shapes), statics=_statics(task))
    if not classify:
        return info
    key = hashlib.sha256((task.source_sha256 + _author_digest() + jax.__version__).encode())
    key = key.hexdigest()[:32]
    cached = _read_cache(key)
    if cached is None:
        from agents.llm.offline.classify import classify_task

        facts = classify_task(path)
        cached = {"kernel_class": facts.kernel_class, "unsupported": facts.unsupported}
        _write_cache(key, cached)
    return TaskInfo(**{**asdict(info), "kernel_class": cached["kernel_class"],
                       "unsupported": cached["unsupported"]})
