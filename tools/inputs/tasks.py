"""Load a task: a reference JAX function, deterministic inputs and the shapes to test.

Two formats are read natively:

* kernelgraph task files (README, "Task file"): ``NAME``, ``reference(*inputs)``,
  ``make_inputs(key, shape_index=0)``, optional ``SHAPES`` (first entry = tuning point,
  the rest = unseen shapes), optional ``TOLERANCE`` and ``flops(*inputs)``.
* JAXBench ``baseline.py`` files: ``CONFIG`` dict, ``create_inputs(dtype=...)``,
  ``workload(*inputs)``, optional ``get_flops()``. Shapes come from scaling the entries of
  ``CONFIG`` that size an input (or bound an integer input's values) by the ``scales``
  given, else ``SCALES`` in the file, else ``DEFAULT_JAXBENCH_SCALES``
  (:mod:`tools.inputs.scaling`); seeds by folding the seed into the file's own
  ``jax.random`` keys.

Either format may set ``NO_NONFINITE_INPUTS = "why"`` (a non-empty string): the suite then
feeds no NaN or inf (its non-finite case, :mod:`tools.correctness.nonfinite`) and records
the reason, loudly, where the suite, the receipt and the report show their notes; or
``{"nan": "why"}`` (or ``"inf"``) to leave out one kind, ``{2: "why"}`` one input by its
position. Only for a reference that is not defined on those inputs, or whose NaN there no
honest kernel can follow.

Task files are trusted (the user wrote them), so they are imported in this process.
Every problem is a :class:`TaskError` that names the file and says what is wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tools.inputs.dtypes import DEFAULT_TOLERANCE, checkable_dtype, default_tolerance
from tools.inputs.files import FileProblem, read_python_source
from tools.inputs.seeds import fold_seeds_of, folded_seeds
from tools.inputs.statics import Statics

if TYPE_CHECKING:
    from tools.inputs.scaling import ConfigRoles

DEFAULT_JAXBENCH_SCALES: tuple[float, ...] = (1.0, 0.75, 0.5)

TaskFormat = Literal["kernelgraph", "jaxbench"]
__all__ = ["DEFAULT_TOLERANCE", "Task", "TaskError", "default_tolerance", "load_task"]


class TaskError(FileProblem):
    """A task file that cannot be used."""


@dataclass(frozen=True)
class Task:
    """A loaded task. ``shapes[0]`` is the tuning point; ``shapes[1:]`` are unseen shapes."""

    name: str
    path: Path
    source_sha256: str
    format: TaskFormat
    shapes: tuple[Any, ...]
    tolerance: dict[str, float]
    module: ModuleType = field(repr=False, compare=False)
    _configs: tuple[dict[str, Any], ...] | None = field(default=None, repr=False, compare=False)
    declared_tolerance: dict[str, float] | None = None  # TOLERANCE as the file states it
    derived_shapes: tuple[int, ...] = ()  # unaligned shapes added by tools.inputs.shapes
    derived_what: tuple[str, ...] = ()  # per derived shape, which sizes leave the tile
    # JAXBench: the entries whose derived shape keeps the other sizes whole (DERIVED_WHOLE)
    derived_whole: tuple[str, ...] = ()
    alignment_note: str = ""  # why tails are not exercised, when they are not
    # NO_NONFINITE_INPUTS: "nan" / "inf" / an input position -> why none is fed there
    nonfinite_opt_out: dict[str | int, str] = field(default_factory=dict, compare=False)
    _specs: dict[int, tuple[Any, ...]] = field(default_factory=dict, repr=False, compare=False)
    # JAXBench: the --scale factors asked for (explicitly, or SCALES in the file) that held,
    # one per shape; () for the file's defaults. Recorded in the suite and the receipt.
    scales: tuple[float, ...] = ()
    config_sizes: tuple[str, ...] = ()  # JAXBench: the CONFIG entries scaling changes
    notes: tuple[str, ...] = ()  # what loading decided that the suite should say
    # Per shape: the Python scalars the input maker returns (static arguments, not inputs:
    # tools.inputs.statics) and the seed they were first seen for.
    _statics: dict[int, tuple[int, Statics]] = field(default_factory=dict, repr=False,
                                                     compare=False)

    def tolerance_for(self, dtype_names: Sequence[str]) -> dict[str, float]:
        """The element-wise ceiling for outputs of these dtypes: the declared TOLERANCE over
        the default of the least precise floating output (integers are compared exactly)."""
        return {**default_tolerance(dtype_names), **(self.declared_tolerance or {})}

    @property
    def unseen_shape_indices(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.shapes)))

    def reference_at(self, shape_index: int = 0) -> Callable[..., Any]:
        """The reference function, bound to the configuration of one shape: a function of
        the arrays alone, the shape's static arguments put back where the maker had them."""
        from tools.inputs.statics import bind

        statics = self.statics_at(shape_index)
        name = f"{self.name}_reference_shape{shape_index}"
        if self.format == "kernelgraph":
            return bind(self.module.reference, statics, name)
        workload = bind(self.module.workload, statics)

        def reference(*inputs: Any) -> Any:
            with self._jaxbench_config(shape_index):
                return workload(*inputs)

        reference.__name__ = name
        return reference

    def statics_at(self, shape_index: int = 0) -> Statics:
        """The static arguments of one shape, (position, value) each (:mod:`tools.inputs.statics`),
        from the maker's trace (seed 0) unless a call for this shape already saw them."""
        self._check_shape_index(shape_index)
        if shape_index not in self._statics:
            from tools.inputs.abstract import input_specs

            input_specs(self, shape_index)  # records them (checked_inputs)
        return self._statics[shape_index][1]

    @property
    def reference(self) -> Callable[..., Any]:
        """The reference at the tuning point."""
        return self.reference_at(0)

    def make_inputs(self, seed: int, shape_index: int = 0) -> tuple[Any, ...]:
        """Deterministic inputs for one (seed, shape); always a tuple of arrays (Python
        scalars the maker returns are static arguments: :meth:`statics_at`)."""
        self._check_shape_index(shape_index)
        try:
            raw = self.call_input_maker(seed, shape_index)
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(
                self.path,
                f"making inputs for seed {seed}, shape {shape_index} raised "
                f"{type(exc).__name__}: {exc}{where_in(exc, self.path)}",
            ) from None
        return self.checked_inputs(raw, seed, shape_index)

    def call_input_maker(self, seed: int, shape_index: int) -> Any:
        """The file's own input maker for one (seed, shape), its errors unwrapped (it may be
        traced: :mod:`tools.inputs.abstract`)."""
        import jax

        if self.format == "kernelgraph":
            return self.module.make_inputs(jax.random.key(seed), shape_index=shape_index)
        with self._jaxbench_config(shape_index), folded_seeds(seed):
            return self.module.create_inputs()

    def checked_inputs(self, raw: Any, seed: int, shape_index: int) -> tuple[Any, ...]:
        """The maker's arrays as a tuple, its Python scalars recorded as the shape's static
        arguments (the same for every seed, or a TaskError); anything else is a TaskError."""
        from tools.inputs.statics import is_static, record, split

        values = raw if isinstance(raw, tuple | list) else (raw,)
        for position, value in enumerate(values):
            if not _is_array(value) and not is_static(value):
                raise TaskError(
                    self.path,
                    f"input {position} from {self._inputs_fn_name} is "
                    f"{type(value).__name__}, expected a JAX array (or a Python bool, int "
                    "or float, passed as a static argument)",
                )
        arrays, statics = split(values)
        record(self, shape_index, seed, statics)
        return tuple(arrays)

    def input_specs(self, shape_index: int = 0) -> tuple[Any, ...]:
        """Shapes and dtypes of the inputs at one shape (``jax.ShapeDtypeStruct``), from
        tracing the input maker: nothing is computed. Cached."""
        self._check_shape_index(shape_index)
        if shape_index not in self._specs:
            from tools.inputs.abstract import input_specs

            self._specs[shape_index] = input_specs(self, shape_index)
        return self._specs[shape_index]

    def flops(self, shape_index: int, inputs: Sequence[Any]) -> int | None:
        """Flops of the reference at one shape when the task declares them, else None."""
        try:
            if self.format == "kernelgraph":  # flops takes the reference's arguments
                from tools.inputs.statics import insert

                fn = getattr(self.module, "flops", None)
                return None if fn is None else int(
                    fn(*insert(inputs, self.statics_at(shape_index))))
            fn = getattr(self.module, "get_flops", None)
            if fn is None:
                return None
            with self._jaxbench_config(shape_index):
                return int(fn())
        except Exception as exc:
            raise TaskError(
                self.path, f"flops for shape {shape_index} raised {type(exc).__name__}: {exc}"
            ) from None

    def describe_shape(self, shape_index: int) -> str:
        """The shape as the user reads it, with its static arguments once they are known."""
        from tools.inputs.statics import shape_note

        shape = self.shapes[shape_index]
        text = repr(shape) if not isinstance(shape, dict) else ", ".join(
            f"{k}={v}" for k, v in shape.items()
        )
        text += shape_note(self, self._statics.get(shape_index, (0, ()))[1])
        if shape_index in self.derived_shapes:
            what = self.derived_what[self.derived_shapes.index(shape_index)]
            text += f" (derived, unaligned: {what})"
        return text

    @property
    def _inputs_fn_name(self) -> str:
        return "make_inputs" if self.format == "kernelgraph" else "create_inputs"

    def _check_shape_index(self, shape_index: int) -> None:
        if not 0 <= shape_index < len(self.shapes):
            raise ValueError(f"{shape_index=} out of range for {len(self.shapes)} shapes")

    @contextlib.contextmanager
    def _jaxbench_config(self, shape_index: int) -> Iterator[None]:
        assert self._configs is not None
        saved = self.module.CONFIG
        self.module.CONFIG = dict(self._configs[shape_index])
        try:
            yield
        finally:
            self.module.CONFIG = saved


def load_task(
    path: str | Path, *, scales: Sequence[float] | None = None, validate: bool = True,
    check_derived: bool = False,
) -> Task:
    """Import and check a task file; ``scales`` overrides a JAXBench file's shape scales.

    With ``validate`` the task is checked without running its workload
    (:mod:`tools.inputs.abstract`): the input maker is traced twice (the traces must agree)
    and the reference is evaluated abstractly on the traced shapes. ``check_derived`` runs
    the reference at the derived shapes whose other sizes were cut
    (:func:`tools.inputs.shapes.with_unaligned_shapes`): done once, where a scaled task is
    written, which records the outcome for every later load.
    """
    path = Path(path)
    if path.is_file() and path.suffix != ".py":
        raise TaskError(path, "a task is a Python file (.py)")
    source, text = read_python_source(path, TaskError)
    try:
        compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise TaskError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    sha = hashlib.sha256(source).hexdigest()
    module = _import(path, sha)
    task = _from_module(path, sha, module, scales)
    task = dataclasses.replace(task, nonfinite_opt_out=_nonfinite_opt_out(path, module))
    if validate:
        validate_task(task)
    from tools.inputs.shapes import with_unaligned_shapes

    return with_unaligned_shapes(task, check_derived=check_derived)


def validate_task(task: Task) -> None:
    """The cheap semantic checks, by abstract evaluation: deterministic inputs, JAX-array
    reference outputs of a checkable dtype."""
    from tools.inputs.abstract import input_specs, output_specs

    task._specs[0] = input_specs(task, 0, check_determinism=True)
    output_specs(task, 0, task._specs[0])


def check_reference_output(task: Task, out: Any) -> list[Any]:
    """The reference's outputs as a flat list; anything but numeric JAX arrays (or their
    abstract ShapeDtypeStructs) is an error."""
    import jax

    fn = "reference" if task.format == "kernelgraph" else "workload"
    leaves = jax.tree.leaves(out)
    if not leaves:
        raise TaskError(task.path, f"{fn} returned no arrays ({type(out).__name__})")
    for position, leaf in enumerate(leaves):
        if not isinstance(leaf, jax.Array | jax.ShapeDtypeStruct):  # (tracers are jax.Array)
            raise TaskError(
                task.path,
                f"{fn} output {position} is {type(leaf).__name__}, expected a JAX array "
                "(non-JAX output)",
            )
        if not checkable_dtype(leaf.dtype):
            raise TaskError(task.path, f"{fn} output {position} has dtype {leaf.dtype}; "
                            "outputs must be floating (bfloat16, float16, float32, ...), "
                            "integer or bool")
    return leaves


def _from_module(path: Path, sha: str, module: ModuleType, scales: Sequence[float] | None) -> Task:
    has = {name: callable(getattr(module, name, None)) for name in
           ("reference", "make_inputs", "workload", "create_inputs")}
    if has["workload"] or has["create_inputs"] or hasattr(module, "CONFIG"):
        return _jaxbench_task(path, sha, module, has, scales)
    missing = [name for name in ("reference", "make_inputs") if not has[name]]
    if missing:
        raise TaskError(
            path,
            "missing function " + " and ".join(f"`{m}`" for m in missing)
            + " (a task defines reference(*inputs) and make_inputs(key, shape_index=0); "
            "a JAXBench baseline defines CONFIG, create_inputs and workload)",
        )
    params = inspect.signature(module.make_inputs).parameters
    if "shape_index" not in params and not any(
        p.kind is p.VAR_KEYWORD for p in params.values()
    ):
        raise TaskError(path, "make_inputs must accept a `shape_index` keyword argument")
    name = getattr(module, "NAME", path.stem)
    if not isinstance(name, str) or not name:
        raise TaskError(path, f"NAME must be a non-empty string, got {name!r}")
    shapes = getattr(module, "SHAPES", [None])
    if not isinstance(shapes, list | tuple) or not shapes:
        raise TaskError(path, "SHAPES must be a non-empty list (first entry = tuning point)")
    return Task(
        name=name,
        path=path,
        source_sha256=sha,
        format="kernelgraph",
        shapes=tuple(shapes),
        tolerance=_tolerance(path, module),
        module=module,
        declared_tolerance=_declared(module),
    )


def _jaxbench_task(
    path: Path,
    sha: str,
    module: ModuleType,
    has: dict[str, bool],
    scales: Sequence[float] | None,
) -> Task:
    missing = [name for name in ("create_inputs", "workload") if not has[name]]
    if not isinstance(getattr(module, "CONFIG", None), dict):
        missing.insert(0, "CONFIG (a dict)")
    if missing:
        raise TaskError(
            path, "JAXBench baseline is missing " + " and ".join(f"`{m}`" for m in missing)
        )
    fold_seeds_of(module)
    explicit = scales is not None or hasattr(module, "SCALES")
    scales = tuple(scales if scales is not None else getattr(module, "SCALES",
                                                             DEFAULT_JAXBENCH_SCALES))
    if not scales or any(not isinstance(s, int | float) or isinstance(s, bool) or s <= 0
                         for s in scales):
        raise TaskError(path, f"scales must be positive numbers, got {scales!r}")
    from tools.inputs.scaling import config_roles, scale_config, select_configs

    base = dict(module.CONFIG)
    roles = config_roles(module, base)
    bound_note = None
    if roles.traced and not roles.sizes:
        base, roles, bound_note = _bind_literal_sizes(module, base, roles)
    configs_by_scale: dict[float, dict[str, Any]] = {}
    for scale in scales:  # scales that round to the same sizes give one shape
        config = scale_config(base, roles.scaled, scale)
        if config not in configs_by_scale.values():
            configs_by_scale[float(scale)] = config
    shapes = tuple({"scale": s, **{k: c[k] for k in roles.scaled}}
                   for s, c in configs_by_scale.items())
    name = base.get("name", path.parent.name if path.stem == "baseline" else path.stem)
    task = Task(
        name=str(name),
        path=path,
        source_sha256=sha,
        format="jaxbench",
        shapes=shapes,
        tolerance=_tolerance(path, module),
        module=module,
        _configs=tuple(configs_by_scale.values()),
        declared_tolerance=_declared(module),
        config_sizes=roles.scaled,
    )
    if bound_note:
        task = dataclasses.replace(task, notes=(*task.notes, bound_note))
    task = select_configs(task, roles, explicit)
    if explicit:
        task = dataclasses.replace(task, scales=tuple(
            float(s["scale"]) for s in task.shapes if isinstance(s.get("scale"), int | float)))
    return task


def _bind_literal_sizes(module: ModuleType, base: dict[str, Any], roles: ConfigRoles
                        ) -> tuple[dict[str, Any], ConfigRoles, str | None]:
    """A task whose CONFIG sizes nothing, with the literals of create_inputs read from
    CONFIG (:mod:`tools.inputs.literals`) when that lets some entry size an input."""
    from tools.inputs.literals import apply, bind_literal_sizes
    from tools.inputs.scaling import config_roles

    bound = bind_literal_sizes(module)
    if bound is None:
        return base, roles, None
    originals = {name: getattr(module, name) for name in bound.functions}
    apply(module, bound)
    new_roles = config_roles(module, dict(bound.config))
    if not new_roles.sizes:  # the literals size nothing either: the file as it is
        module.CONFIG = base
        for name, function in originals.items():
            setattr(module, name, function)
        return base, roles, None
    return dict(bound.config), new_roles, (
        "create_inputs fixes its sizes as literals; they are read from CONFIG ("
        + ", ".join(new_roles.sizes) + ") so the sizes can be scaled")


def _tolerance(path: Path, module: ModuleType) -> dict[str, float]:
    tol = getattr(module, "TOLERANCE", None)
    if tol is None:
        return dict(DEFAULT_TOLERANCE)
    if not isinstance(tol, dict) or not set(tol) <= {"atol", "rtol"}:
        raise TaskError(path, f"TOLERANCE must be a dict with atol/rtol, got {tol!r}")
    merged = {**DEFAULT_TOLERANCE, **tol}
    if any(not isinstance(v, int | float) or v < 0 for v in merged.values()):
        raise TaskError(path, f"TOLERANCE values must be non-negative numbers, got {tol!r}")
    return {k: float(v) for k, v in merged.items()}


def _nonfinite_opt_out(path: Path, module: ModuleType) -> dict[str | int, str]:
    from tools.correctness.nonfinite import opt_out

    why = getattr(module, "NO_NONFINITE_INPUTS", None)
    if why is None:
        return {}
    found = opt_out(why)
    if found is None:
        raise TaskError(path, "NO_NONFINITE_INPUTS must be a non-empty string saying why the "
                        "reference is not defined on NaN or inf inputs, or a dict of "
                        f"'nan', 'inf' or input positions to such strings; got {why!r}")
    return found


def _declared(module: ModuleType) -> dict[str, float] | None:
    tol = getattr(module, "TOLERANCE", None)  # already checked by _tolerance
    return None if tol is None else {k: float(v) for k, v in tol.items()}


def _import(path: Path, sha: str) -> ModuleType:
    module_name = f"_kernelgraph_task_{path.stem}_{sha[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise TaskError(
            path, f"importing raised {type(exc).__name__}: {exc}{where_in(exc, path)}"
        ) from None
    return module


def where_in(exc: BaseException, path: Path) -> str:
    """' (line N)' for the deepest frame of the traceback inside the task file."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if Path(f.filename).resolve() == path.resolve()]
    return f" (line {lines[-1]})" if lines else ""


def _is_array(value: Any) -> bool:
    import jax

    return isinstance(value, jax.Array | np.ndarray)
