"""Scaling a JAXBench task: which CONFIG entries are sizes, and which scaled configs hold.

A JAXBench ``CONFIG`` mixes sizes (``seq_len``, ``emb_dim``), constants (``rope_theta``,
``epsilon``) and values that bound indices (``max_seq_len``, which becomes the lengths in
an integer input). Scaling every integer would change a rope theta; scaling only sizes
would leave lengths pointing past shrunken buffers. So each integer entry of at least
``MIN_SIZE`` is probed, by abstract evaluation of ``create_inputs`` with that entry doubled:

* a **size** changes some input's shape: it is scaled;
* an **index** changes the values of an integer input but no shape: it is scaled with the
  sizes, so lengths and offsets keep pointing inside what they index;
* anything else (a theta, a group count the workload alone reads) is left as it is.

Each scaled config is then checked, without running the workload: the input maker and the
reference must trace at it, and integer inputs must shrink at least as much as the sizes
(an index that did not follow would point past the end), unless they are a ratio of sizes
(tokens per expert stay the same when tokens and experts both shrink; such a value moves
when one size alone is doubled, a fixed index does not). An integer input whose values
do not change at all must instead be used against the same extents as at full size
(:mod:`tools.inputs.indexing`): a page table and query offsets fixed in Python hold where
the entries sizing what they index are kept at full size and only heads shrink, and break
where one of those entries is scaled, even alone. A scaled config that fails is
dropped with a note; a tuning point that fails refuses the task with the reason. Configs
whose inputs come out the same shapes are one shape. A task whose inputs no entry sizes
runs at its own sizes only, and an explicit ``--scale`` for it is refused.

:func:`write_scaled_task` writes a task file that is the original plus ``SCALES``, so a
scaled task is an ordinary task file every loader (the suite, the verifier, the timing
child, a remote agent given its source) reads the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

MIN_SIZE = 16  # smaller integers (head counts, kernel sizes, top-k) are never scaled
MAX_INDEX_ELEMENTS = 1 << 22  # integer inputs larger than this are not made to be compared
SCALED_MARK = "# --- kernelgraph: the sizes above, scaled ---"


@dataclass(frozen=True)
class ConfigRoles:
    sizes: tuple[str, ...]  # entries that size an input
    indices: tuple[str, ...]  # entries that set integer inputs' values
    traced: bool  # False: create_inputs could not be traced; every integer >= 16 is a size
    held: tuple[str, ...] = ()  # SCALE_KEEP: entries kept at full size, neither of the above

    @property
    def scaled(self) -> tuple[str, ...]:
        return self.sizes + self.indices


def _candidates(config: dict[str, Any], held: Sequence[str] = ()) -> list[str]:
    return [k for k, v in config.items() if k not in held
            and isinstance(v, int) and not isinstance(v, bool) and v >= MIN_SIZE]


def held_entries(module: ModuleType) -> tuple[str, ...]:
    """The entries a scaled task file keeps at full size (``SCALE_KEEP``, written by
    :mod:`tools.inputs.scalefit` when scaling them would break the task)."""
    held = getattr(module, "SCALE_KEEP", ())
    return tuple(str(name) for name in held) if isinstance(held, list | tuple) else ()


def _specs(module: ModuleType, config: dict[str, Any]) -> tuple[Any, ...]:
    import jax

    saved, module.CONFIG = module.CONFIG, dict(config)
    try:
        closed = jax.make_jaxpr(lambda: module.create_inputs())()
    finally:
        module.CONFIG = saved
    return tuple((tuple(a.shape), str(a.dtype)) for a in closed.out_avals)


_MADE: dict[tuple[int, str], dict[int, np.ndarray] | None] = {}  # (module, config) -> inputs


def integer_inputs(module: ModuleType, config: dict[str, Any]) -> dict[int, np.ndarray] | None:
    """The integer inputs at ``config`` by position, made under jit (the rest is never
    computed); None
    when there are none or they are too large to make for a check. Remembered per module
    and config: loading a task asks for the same ones several times."""
    key = (id(module), repr(sorted(config.items())))
    if key not in _MADE:
        if len(_MADE) > 256:
            _MADE.clear()
        _MADE[key] = _make_integer_inputs(module, config)
    return _MADE[key]


def _make_integer_inputs(module: ModuleType,
                         config: dict[str, Any]) -> dict[int, np.ndarray] | None:
    import jax
    import jax.numpy as jnp

    specs = _specs(module, config)
    wanted = [i for i, (shape, dtype) in enumerate(specs)
              if jnp.issubdtype(np.dtype(dtype), jnp.integer)]
    if not wanted or sum(math.prod(specs[i][0]) for i in wanted) > MAX_INDEX_ELEMENTS:
        return None
    saved, module.CONFIG = module.CONFIG, dict(config)
    try:
        made = jax.jit(lambda: [module.create_inputs()[i] for i in wanted])()
    finally:
        module.CONFIG = saved
    return {i: np.asarray(x) for i, x in zip(wanted, made, strict=True)}


def config_roles(module: ModuleType, config: dict[str, Any]) -> ConfigRoles:
    """Which integer entries of ``config`` are sizes and which are indices (module doc);
    the entries the file keeps at full size (``SCALE_KEEP``) are neither."""
    held = tuple(k for k in held_entries(module) if k in config)
    names = _candidates(config, held)
    try:
        base = _specs(module, config)
    except Exception:  # not traceable: the old rule, every integer >= MIN_SIZE is a size
        return ConfigRoles(tuple(names), (), traced=False, held=held)
    sizes, rest = [], []
    for name in names:
        try:
            changed = _specs(module, {**config, name: config[name] * 2}) != base
        except Exception:  # the maker rejects the doubled value: it constrains the inputs
            changed = True
        (sizes if changed else rest).append(name)
    indices = []
    if rest:
        try:
            values = integer_inputs(module, config)
        except Exception:  # integer inputs that cannot be made here cannot be compared
            values = None
        for name in rest if values is not None else ():
            try:
                doubled = integer_inputs(module, {**config, name: config[name] * 2})
            except Exception:  # an entry the maker needs as it is: an index, to be safe
                doubled = None
            if doubled is None or any(not np.array_equal(values[i], doubled[i])
                                      for i in values):
                indices.append(name)
    return ConfigRoles(tuple(sizes), tuple(indices), traced=True, held=held)


def scale_config(config: dict[str, Any], names: Sequence[str], scale: float) -> dict[str, Any]:
    """``names`` scaled to a multiple of 8 (or of their own factor below 8), so scales like
    0.75 give sizes that are not powers of two."""
    scaled = dict(config)
    for key in names:
        value = config[key]
        align = math.gcd(value, 8)
        scaled[key] = max(align, round(value * scale / align) * align)
    return scaled


def select_configs(task: Task, roles: ConfigRoles, explicit: bool) -> Task:
    """``task`` with only the scaled configs that hold (module doc), deduplicated by their
    inputs' shapes, and notes for what was dropped. TaskError when the tuning point fails,
    or when an explicit scale cannot change the task's sizes."""
    from tools.inputs.tasks import TaskError

    configs = task._configs or ()
    base = dict(task.module.CONFIG)
    notes: list[str] = [str(n) for n in getattr(task.module, "SCALE_NOTES", ())]
    if roles.traced and not roles.sizes:
        if explicit and any(s.get("scale") != 1.0 for s in task.shapes):
            raise TaskError(task.path, "--scale cannot change this task's sizes: no CONFIG "
                            "entry sizes an input of create_inputs (they are fixed there)")
        notes.append("no CONFIG entry sizes an input of create_inputs: the task runs at "
                     "its own sizes only")
    if not roles.traced:
        notes.append("create_inputs could not be traced: every integer of 16 or more in "
                     "CONFIG is scaled as a size, unchecked")
    try:
        full = integer_inputs(task.module, base) if roles.traced else None
    except Exception:  # checked below per config, where it fails again with its reason
        full = None
    kept: list[int] = []
    seen: set[tuple[Any, ...]] = set()
    for index, config in enumerate(configs):
        problem, shapes = _config_problem(task, index, config, base, roles, full)
        if problem is None and shapes in seen:
            continue
        if problem is not None:
            if index == 0:
                raise TaskError(task.path, f"the tuning point ({task.describe_shape(0)}) "
                                f"does not hold: {problem}")
            notes.append(f"scale {task.shapes[index].get('scale')} dropped: {problem}")
            continue
        seen.add(shapes)
        kept.append(index)
    return dataclasses.replace(
        task, shapes=tuple(task.shapes[i] for i in kept),
        _configs=tuple(configs[i] for i in kept), notes=(*task.notes, *notes),
        _specs={new: task._specs[old] for new, old in enumerate(kept) if old in task._specs},
        _statics={new: task._statics[old] for new, old in enumerate(kept)
                  if old in task._statics})


def config_problem(task: Task, index: int) -> str | None:
    """Why the config at ``index`` of a loaded JAXBench task does not hold (None: it does)."""
    base = dict(task.module.CONFIG)
    held = tuple(k for k in held_entries(task.module) if k in base)
    roles = ConfigRoles(task.config_sizes, (), traced=True, held=held)
    try:
        full = integer_inputs(task.module, base)
    except Exception:  # then the integer inputs are not compared
        full = None
    return _config_problem(task, index, (task._configs or ())[index], base, roles, full)[0]


def probe_config(task: Task, config: dict[str, Any], roles: ConfigRoles,
                 full: dict[int, np.ndarray] | None) -> str | None:
    """Why ``config`` does not hold for ``task`` (None: it does), ``task`` being loaded at
    its full sizes and ``full`` its integer inputs there: the check a scaled config gets."""
    return _config_problem(_at_config(task, config), 0, config, dict(task.module.CONFIG),
                           roles, full)[0]


def _at_config(task: Task, config: dict[str, Any]) -> Task:
    """``task`` with ``config`` as its only shape, nothing of its own shapes cached."""
    return dataclasses.replace(task, shapes=({"scale": None},), _configs=(config,),
                               _specs={}, _statics={})


def _config_problem(task: Task, index: int, config: dict[str, Any], base: dict[str, Any],
                    roles: ConfigRoles, full: dict[int, np.ndarray] | None
                    ) -> tuple[str | None, tuple[Any, ...]]:
    """Why the config at ``index`` does not hold (None: it does), and its inputs' shapes."""
    from tools.inputs.abstract import output_specs

    try:
        specs = task.input_specs(index)
        output_specs(task, index, specs)
    except Exception as exc:  # the reason this scaled config is dropped (or refused)
        return _first_line(exc), ()
    shapes = tuple((tuple(s.shape), str(s.dtype)) for s in specs)
    if full is not None and roles.sizes:
        ratio = max(config[k] / base[k] for k in roles.sizes)
        try:
            scaled = integer_inputs(task.module, config)
        except Exception as exc:  # integer inputs that cannot be made at this config
            return _first_line(exc), shapes
        for position, big in full.items():
            small = (scaled or {}).get(position)
            if small is None or not small.size:
                continue
            if big.shape == small.shape and np.array_equal(big, small):
                if not _used_as_at_full_size(task, index, config, base, position):
                    return (f"integer input {position} keeps values up to "
                            f"{int(np.abs(small).max())} while an extent it indexes or is "
                            "compared with shrinks (an index fixed in Python that does not "
                            "follow CONFIG)"), shapes
                continue
            bound = float(np.abs(big).max(initial=0)) * ratio + 1
            if float(np.abs(small).max()) > bound \
                    and not _ratio_of_sizes(task.module, base, roles.sizes, position, small):
                return (f"integer input {position} keeps values up to "
                        f"{int(np.abs(small).max())} while sizes shrink to {ratio:.3g} of "
                        "the original (an index that does not follow CONFIG)"), shapes
    return None, shapes


_SIGNATURES: dict[tuple[int, str], Any] = {}  # (module, config) -> index_signature


def _signature(task: Task, index: int, config: dict[str, Any]) -> dict[int, Any]:
    """:func:`tools.inputs.indexing.index_signature` of the reference at ``config``, keyed
    by the positions of ``create_inputs``' outputs (static arguments put back)."""
    from tools.inputs.indexing import index_signature

    key = (id(task.module), repr(sorted(config.items())))
    if key not in _SIGNATURES:
        if len(_SIGNATURES) > 64:
            _SIGNATURES.clear()
        statics = sorted(position for position, _ in task.statics_at(index))
        specs = task.input_specs(index)
        by_argument = index_signature(task.reference_at(index), specs)
        made = [p for p in range(len(specs) + len(statics)) if p not in statics]
        _SIGNATURES[key] = {made[a]: counts for a, counts in by_argument.items()}
    return _SIGNATURES[key]


def _used_as_at_full_size(task: Task, index: int, config: dict[str, Any],
                          base: dict[str, Any], position: int) -> bool:
    """Whether an integer input whose values did not change with the config is used
    against the same extents as at full size: every extent it indexes or is compared with
    (:mod:`tools.inputs.indexing`) kept, by entries held at full size or not scaled. Page
    tables and query offsets fixed in Python hold this way when tokens and pages are kept
    and only heads shrink; a length that meets a shrunken axis does not."""
    if config == base:
        return True
    try:
        at_full = _signature(_at_config(task, base), 0, base).get(position)
        scaled = _signature(task, index, config).get(position)
    except Exception:  # a reference that cannot be traced here says nothing: not shown
        return False
    return at_full == scaled


def _ratio_of_sizes(module: ModuleType, base: dict[str, Any], sizes: Sequence[str],
                    position: int, small: np.ndarray) -> bool:
    """Whether an integer input that did not shrink with the sizes is a ratio of them (the
    tokens per expert of a grouped matmul: M / G stays the same when both shrink): no
    larger than at full size, and moving with some size entry (at least 1.5x either way
    when it doubles). A fixed index (a literal, a random draw below a constant) moves
    with none and is still refused."""
    full = integer_inputs(module, base) or {}
    if position not in full or not full[position].size:
        return False
    top = float(np.abs(full[position]).max())
    if top <= 0 or float(np.abs(small).max()) > top:
        return False
    for name in sizes:
        try:
            doubled = (integer_inputs(module, {**base, name: base[name] * 2}) or {}).get(position)
        except Exception:  # the maker rejects the doubled entry: it says nothing of this input
            continue
        if doubled is not None and doubled.size:
            moved = float(np.abs(doubled).max()) / top
            if moved >= 1.5 or moved <= 1 / 1.5:
                return True
    return False


def _first_line(exc: BaseException) -> str:
    from tools.inputs.files import FileProblem

    if isinstance(exc, FileProblem):  # already says what is wrong; the file is named once
        return textwrap.shorten(exc.problem.splitlines()[0], 300, placeholder=" ...")
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: " + (textwrap.shorten(text[0], 240, placeholder=" ...")
                                        if text else "")


def parse_scales(text: str | Sequence[str] | Sequence[float] | None) -> tuple[float, ...] | None:
    """``"0.5,0.25"`` or ``["0.5", "0.25"]`` (a repeated option) as factors; None stays None.
    ValueError names a factor that is not a positive number."""
    if text is None:
        return None
    parts = [text] if isinstance(text, str) else list(text)
    factors: list[float] = []
    for part in parts:
        for item in str(part).split(","):
            if not item.strip():
                continue
            try:
                value = float(item)
            except ValueError:
                raise ValueError(f"--scale {item.strip()!r} is not a number") from None
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"--scale {item.strip()!r} must be a positive number")
            factors.append(value)
    if not factors:
        raise ValueError("--scale needs at least one factor, e.g. --scale 0.5,0.25")
    return tuple(factors)


def write_scaled_task(path: str | Path, scales: Sequence[float], keep: Sequence[str] = (),
                      notes: Sequence[str] = (), *, whole: Sequence[str] = ()) -> Path:
    """A task file that is ``path`` with ``SCALES = [...]`` appended (and ``SCALE_KEEP``, the
    entries kept at full size, and ``SCALE_NOTES``, why, when a scale had to be fitted:
    :mod:`tools.inputs.scalefit`; ``DERIVED_WHOLE``, the entries whose derived unaligned shape
    keeps the other sizes whole: :mod:`tools.inputs.shapes`), written once where every
    process can read it (named by its content; JAXBench's ``<task>/baseline.py`` layout
    kept, so the task keeps its name)."""
    from tools.inputs.files import read_python_source
    from tools.inputs.tasks import TaskError

    source = Path(path)
    _, text = read_python_source(source, TaskError)
    if SCALED_MARK in text:  # already scaled: scale the original sizes instead
        text = text[: text.index(SCALED_MARK)].rstrip() + "\n"
    text += (f"\n\n{SCALED_MARK}\nSCALES = {[float(s) for s in scales]!r}\n")
    if keep:
        text += f"SCALE_KEEP = {[str(k) for k in keep]!r}\n"
    if notes:
        text += f"SCALE_NOTES = {[str(n) for n in notes]!r}\n"
    if whole:
        text += f"DERIVED_WHOLE = {[str(n) for n in whole]!r}\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"kernelgraph-scaled-{os.getuid()}" / digest
    folder = root / source.parent.name if source.stem == "baseline" else root
    target = folder / source.name
    if not target.is_file() or target.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        for directory in (root.parent, root, folder):
            directory.chmod(0o755)  # the sandboxed timing child reads it as another user
        partial = target.with_suffix(".partial")
        partial.write_text(text)
        partial.chmod(0o644)
        partial.replace(target)
    return target
