"""Run a traced program under TPU interpret mode without tracing the candidate again.

The candidate's Python runs once, when the child traces it. The jaxpr of that one trace is
lowered for TPU (the text the parent audits and models) and is also what runs here: this
evaluator walks the jaxpr, binds every ``pallas_call`` with ``interpret=InterpretParams``
and inlines the jit/call wrappers around it (their recorded effects predate interpret mode,
which adds IO effects). So the kernels that ran are exactly the kernels that were lowered.

``InterpretParams`` as of jax 0.10.2 offers ``uninitialized_memory="nan"`` (every buffer the
kernel allocates, outputs included, starts as NaN), ``detect_races`` (a happens-before race
detector across simulated cores), ``random_seed`` (grid coordinates along ``parallel``
dimensions are randomly permuted; ``arbitrary`` dimensions keep their order) and
``num_cores_or_threads`` (the parallel subgrid is split between simulated cores). Races are
reported through a module-level ``RaceDetectionState`` that is replaced at every kernel
start; :class:`RaceLog` keeps all of them so no kernel's finding is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelgraph.errors import KernelgraphError
from tools import jaxprivate
from tools.child.branches import BranchCounter, Layout
from tools.child.branches import sub_jaxprs as _sub_jaxprs
from tools.jaxpreval import evaluate, inner


class UnsupportedProgram(KernelgraphError, ValueError):
    """A program shape the evaluator cannot run faithfully (e.g. a kernel inside a loop)."""


@dataclass(frozen=True)
class InterpretSettings:
    uninitialized_memory: str = "nan"
    detect_races: bool = True
    random_seed: int = 0
    num_cores: int = 2

    def params(self) -> Any:
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.InterpretParams(
            uninitialized_memory=self.uninitialized_memory,  # type: ignore[arg-type]
            detect_races=self.detect_races,
            random_seed=self.random_seed,
            num_cores_or_threads=self.num_cores,
            grid_point_recorder=_record_grid_point,
        )


MAX_RECORDED_GRID_POINTS = 1 << 16


@dataclass
class KernelVisits:
    """What interpret mode did in one kernel run, for the cost model's cross-check: grid
    points visited (and their order, up to a cap), blocks fetched per input and written
    per output (by the pipeline, keyed by the kernel's argument name), manual DMAs, and how
    often each side of each conditional ran (:mod:`tools.child.branches`)."""

    grid_points: int = 0
    order: list[tuple[int, ...]] = field(default_factory=list)
    order_complete: bool = True
    cores: set[int] = field(default_factory=set)
    input_fetches: dict[str, int] = field(default_factory=dict)
    output_writes: dict[str, int] = field(default_factory=dict)
    dma_starts: int = 0
    layout: Layout | None = None
    branch_runs: dict[tuple[int, int], int] = field(default_factory=dict)
    branch_conflict: bool = False

    def summary(self) -> dict[str, Any]:
        layout = self.layout
        return {"grid_points": self.grid_points,
                "order": [list(p) for p in self.order] if self.order_complete else [],
                "order_complete": self.order_complete, "cores": len(self.cores),
                "input_fetches": sorted(self.input_fetches.values()),
                "output_writes": sorted(self.output_writes.values()),
                "dma_starts": self.dma_starts,
                "branches": layout.counts(self.branch_runs) if layout is not None else [],
                "branches_complete": not self.branch_conflict and (
                    layout is None or layout.complete)}


_ACTIVE: list[RaceLog] = []


@dataclass
class RaceLog:
    """Every race-detector state created while it is installed (one per kernel run), and
    what each of those kernel runs visited (:class:`KernelVisits`)."""

    states: list[Any] = field(default_factory=list)
    visits: list[KernelVisits] = field(default_factory=list)
    branches: BranchCounter | None = None

    def install(self) -> None:
        ipc = jaxprivate.interpret_pallas_call()
        visits_now = self.visits
        self.branches = BranchCounter(lambda: visits_now[-1] if visits_now else None)
        self.branches.install(ipc)
        original = ipc.RaceDetectionState
        log = self.states
        visits = self.visits

        def recording(*args: Any, **kwargs: Any) -> Any:
            state = original(*args, **kwargs)
            log.append(state)
            visits.append(KernelVisits())
            return state

        ipc.RaceDetectionState = recording  # type: ignore[assignment,misc]
        self._count_transfers(ipc)
        _ACTIVE[:] = [self]

    def _count_transfers(self, ipc: Any) -> None:
        """Count the pipeline's block copies (`get` with an input name, `store` with an
        output name) and manual DMA starts, into the current kernel's record."""
        get, store, dma_start = ipc.get, ipc.store, ipc.dma_start
        visits = self.visits

        def counting_get(*args: Any, **kwargs: Any) -> Any:
            name = kwargs.get("input_name")
            if name is not None and visits:
                fetches = visits[-1].input_fetches
                fetches[name] = fetches.get(name, 0) + 1
            return get(*args, **kwargs)

        def counting_store(*args: Any, **kwargs: Any) -> Any:
            name = kwargs.get("output_name")
            if name is not None and visits:
                writes = visits[-1].output_writes
                writes[name] = writes.get(name, 0) + 1
            return store(*args, **kwargs)

        def counting_dma_start(*args: Any, **kwargs: Any) -> Any:
            if visits:
                visits[-1].dma_starts += 1
            return dma_start(*args, **kwargs)

        for wrapper, original in ((counting_get, get), (counting_store, store),
                                  (counting_dma_start, dma_start)):
            if hasattr(original, "__wrapped__"):  # DMAs call the undecorated function
                wrapper.__wrapped__ = original.__wrapped__  # type: ignore[attr-defined]
        ipc.get, ipc.store, ipc.dma_start = counting_get, counting_store, counting_dma_start

    def record_grid_point(self, token: Any, grid_point: Any, core: Any) -> Any:
        if self.visits:
            record = self.visits[-1]
            record.grid_points += 1
            record.cores.add(int(core))
            if len(record.order) < MAX_RECORDED_GRID_POINTS:
                record.order.append(tuple(int(x) for x in grid_point))
            else:
                record.order_complete = False
        return token

    def mark(self) -> int:
        return len(self.states)

    def races_since(self, mark: int) -> bool:
        return any(bool(getattr(s, "races_found", False)) for s in self.states[mark:])

    def visits_since(self, mark: int) -> tuple[dict[str, Any], ...]:
        """What each kernel run since `mark` visited, in run order (JSON-ready)."""
        return tuple(v.summary() for v in self.visits[mark:])


def _record_grid_point(token: Any, grid_point: Any, core: Any) -> Any:
    return _ACTIVE[0].record_grid_point(token, grid_point, core) if _ACTIVE else token


def count_pallas_calls(closed_jaxpr: Any) -> int:
    """How many pallas_call equations the program holds, nested wrappers included."""
    return sum(1 for _ in _pallas_eqns(closed_jaxpr.jaxpr))


def splits_across_cores(closed_jaxpr: Any) -> bool:
    """Would a second simulated core run any grid point? Interpret mode divides only the
    grid dimensions marked parallel between cores; an all-arbitrary grid runs on core 0 and
    leaves core 1 idle, so there two cores cost time and check nothing one core does not.
    A kernel over a mesh (``core_map``), or whose grid or semantics cannot be read, counts
    as split."""
    for eqn in _pallas_eqns(closed_jaxpr.jaxpr):
        if eqn.params.get("mesh") is not None:
            return True
        grid = getattr(eqn.params.get("grid_mapping"), "grid", None)
        params = eqn.params.get("compiler_params")
        if isinstance(params, dict):  # older jax: keyed by backend
            params = params.get("mosaic_tpu", params.get("mosaic"))
        semantics = getattr(params, "dimension_semantics", None)
        if grid is None:
            return True
        for size, kind in zip(grid, semantics or (), strict=False):
            if "parallel" in str(kind).lower() and not (isinstance(size, int) and size <= 1):
                return True
    return False


def interpreted(closed_jaxpr: Any, settings: InterpretSettings) -> Callable[..., list[Any]]:
    """A jitted function evaluating ``closed_jaxpr`` with every pallas_call interpreted."""
    import jax

    params = settings.params()
    jaxpr, consts = closed_jaxpr.jaxpr, closed_jaxpr.consts
    _check_supported(jaxpr)

    def run(*args: Any) -> list[Any]:
        return _eval(jaxpr, consts, args, params)

    return jax.jit(run)


SECOND_POISON = "huge"


def install_second_poison() -> None:
    """Teach interpret mode a second poison for memory never written: half the largest
    finite value for floats, the minimum for integers, False for bools. NaN alone misses a
    read whose NaN a comparison masks (`where(m_prev > x, m_prev, x)` on an uninitialised
    running max); a huge finite value changes such a kernel's output."""
    utils = jaxprivate.interpret_utils()
    original = utils.get_uninitialized_value
    if getattr(original, "second_poison", False):
        return

    def uninitialized_value(dtype: Any, uninitialized_memory: str) -> Any:
        if uninitialized_memory != SECOND_POISON:
            return original(dtype, uninitialized_memory)
        import jax.numpy as jnp

        if jnp.issubdtype(dtype, jnp.floating):
            return float(jnp.finfo(dtype).max) / 2
        if jnp.issubdtype(dtype, jnp.integer):
            return int(jnp.iinfo(dtype).min)
        return False

    uninitialized_value.second_poison = True  # type: ignore[attr-defined]
    utils.get_uninitialized_value = uninitialized_value


def reset_after_failure() -> None:
    """Interpret mode keeps global state after an exception; clear it before the next run."""
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()


def _eval(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], params: Any) -> list[Any]:
    source_info_util = jaxprivate.source_info_util()

    def bind(eqn: Any, invals: list[Any]) -> Any:
        bind_params = eqn.primitive.get_bind_params(eqn.params)
        if eqn.primitive.name == "pallas_call":
            bind_params = {**bind_params, "interpret": params}
            if _ACTIVE and _ACTIVE[0].branches is not None:  # count its pl.when sides
                _ACTIVE[0].branches.register(eqn.params["jaxpr"])
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        with (
            source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack),
            eqn.ctx.manager,
        ):
            return eqn.primitive.bind(*invals, **bind_params)

    return evaluate(jaxpr, consts, args, bind)


def _pallas_eqns(jaxpr: Any) -> list[Any]:
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            found.append(eqn)
            continue
        for sub in _sub_jaxprs(eqn):
            found.extend(_pallas_eqns(sub))
    return found


def _check_supported(jaxpr: Any) -> None:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "pallas_call":
            continue
        if inner(eqn) is not None:
            _check_supported(inner(eqn).jaxpr)
            continue
        for sub in _sub_jaxprs(eqn):
            if _pallas_eqns(sub):
                raise UnsupportedProgram(
                    f"a pallas_call inside `{name}` (a loop or branch around a kernel) cannot "
                    "be run under interpret mode from the lowered trace; call the kernel "
                    "outside control flow"
                )
