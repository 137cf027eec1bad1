"""Every use of JAX's private modules (`jax._src`), in one place.

The evaluator needs a few things JAX does not export: the MLIR bindings and the TPU dialect
(to read a lowered program), the lowering-rule tables and the interpreter's internals (to
notice tampering and to run kernels under TPU interpret mode), and `tpu_info` (chip
records). Private modules change between JAX releases; keeping every import of them here
means a JAX upgrade is checked against one file. Each accessor imports on first call, so
importing this module stays cheap and the child's import order is unchanged.
"""

from __future__ import annotations

from types import ModuleType

PRIVATE_ROOT = "jax._src"
PALLAS_PACKAGE = f"{PRIVATE_ROOT}.pallas"

# Private functions the sandboxed child guards against replacement (checked by identity).
GUARDED = (
    f"{PALLAS_PACKAGE}.pallas_call._pallas_call_lowering",
    f"{PALLAS_PACKAGE}.mosaic.interpret.interpret_pallas_call.interpret_pallas_call",
    f"{PRIVATE_ROOT}.callback.io_callback_impl",
)
# The package whose functions interpret mode calls back into for every memory access.
INTERPRET_PACKAGE = f"{PALLAS_PACKAGE}.mosaic.interpret"


def core() -> ModuleType:
    """`jax._src.core`: Jaxpr, ClosedJaxpr, Literal and the primitive machinery."""
    from jax._src import core as module

    return module


def source_info_util() -> ModuleType:
    """`jax._src.source_info_util`: name stacks and user contexts for re-binding equations."""
    from jax._src import source_info_util as module

    return module


def mlir_ir() -> ModuleType:
    """`jax._src.lib.mlir.ir`: the MLIR Python bindings bundled with jaxlib."""
    from jax._src.lib.mlir import ir as module

    return module


def jax_mlir() -> ModuleType:
    """`jax._src.interpreters.mlir`: IR contexts and the MLIR lowering-rule tables."""
    from jax._src.interpreters import mlir as module

    return module


def compiler() -> ModuleType:
    """`jax._src.compiler`: the compile options JAX itself would pass to XLA (the TPU
    compiler run ahead of time, tools/lowered/tpu_compiler.py)."""
    from jax._src import compiler as module

    return module


def tpu_dialect() -> ModuleType:
    """`jax._src.lib.tpu`: registers the Mosaic TPU dialect on an MLIR context."""
    from jax._src.lib import tpu as module

    return module


def tpu_info() -> ModuleType:
    """`jax._src.pallas.mosaic.tpu_info`: JAX's per-chip records (VMEM, bandwidth, peaks)."""
    from jax._src.pallas.mosaic import tpu_info as module

    return module


def mosaic_lowering() -> ModuleType:
    """`jax._src.pallas.mosaic.lowering`: the Mosaic kernel-body lowering rules."""
    from jax._src.pallas.mosaic import lowering as module

    return module


def interpret_pallas_call() -> ModuleType:
    """`jax._src.pallas.mosaic.interpret.interpret_pallas_call`: TPU interpret mode."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as module

    return module


def interpret_utils() -> ModuleType:
    """`jax._src.pallas.mosaic.interpret.utils`: the value uninitialised memory holds."""
    from jax._src.pallas.mosaic.interpret import utils as module

    return module


def callback() -> ModuleType:
    """`jax._src.callback`: how a compiled program's `io_callback` reaches Python (interpret
    mode calls back for every memory access)."""
    from jax._src import callback as module

    return module


def interpret_thread_map() -> ModuleType:
    """`jax._src.pallas.mosaic.interpret.thread_map`: how interpret mode runs simulated
    cores, one thread each, each compiling the per-core program it runs."""
    from jax._src.pallas.mosaic.interpret import thread_map as module

    return module


def pallas_package() -> ModuleType:
    """`jax._src.pallas`: the package whose submodules register every Pallas lowering."""
    import jax._src.pallas

    return jax._src.pallas


def program_classes() -> dict[str, type]:
    """The classes a traced program may hold in its parameters and effects, by stable name:
    the only ones :mod:`tools.child.programs` encodes and rebuilds (anything else fails)."""
    from jax._src import core as jcore
    from jax._src import linear_util, literals, mesh, named_sharding
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas import primitives as pallas_primitives
    from jax._src.pallas.mosaic import core as tpu_core
    from jax._src.state import indexing
    from jax._src.state import types as state_types

    found: dict[str, type] = {
        "ShapedArray": jcore.ShapedArray,
        "TypedInt": literals.TypedInt,
        "TypedFloat": literals.TypedFloat,
        "TypedComplex": literals.TypedComplex,
        "TypedNdArray": literals.TypedNdArray,
        "DebugInfo": linear_util.DebugInfo,
        "AbstractRef": state_types.AbstractRef,
        "ReadEffect": state_types.ReadEffect,
        "WriteEffect": state_types.WriteEffect,
        "AccumEffect": state_types.AccumEffect,
        "NDIndexer": indexing.NDIndexer,
        "TransformedRef": state_types.TransformedRef,
        "Slice": indexing.Slice,
        "UnspecifiedValue": named_sharding.UnspecifiedValue,
        "AbstractMesh": mesh.AbstractMesh,
        "Mesh": mesh.Mesh,
        "TpuCompilerParams": tpu_core.CompilerParams,
        "TpuMemorySpace": tpu_core.MemorySpace,
        "SemaphoreType": tpu_core.SemaphoreType,
        "DMASemaphore": tpu_core.DMASemaphore,
        "DeviceIdType": pallas_primitives.DeviceIdType,
    }
    from jax import lax

    for name in ("Precision", "DotAlgorithmPreset", "GatherScatterMode",
                 "GatherDimensionNumbers", "ScatterDimensionNumbers", "ConvDimensionNumbers"):
        cls = getattr(lax, name, None)
        if isinstance(cls, type):  # dot precision, gather/scatter/conv layouts: plain data
            found.setdefault(f"lax.{name}", cls)
    for name in ("GridMapping", "BlockMapping", "Blocked", "Element", "Squeezed",
                 "BoundedSlice", "Buffered", "MemorySpace", "CostEstimate", "Semaphore",
                 "BarrierSemaphore"):
        cls = getattr(pallas_core, name, None)
        if isinstance(cls, type):
            found.setdefault(f"pallas.{name}", cls)
    return found


def tree_registries() -> tuple[object, ...]:
    """Pytree registries a program's tree parameters are built in: the default one, and the
    tracing one (where JAX registers TransformedRef)."""
    from jax._src import tree_util

    return tree_util.default_registry, tree_util.tracing_registry


def wrapped_stub(fn: object, name: str) -> object:
    """`fn` as the WrappedFun JAX keeps for a rule it may never call (a custom_jvp's jvp)."""
    from jax._src import linear_util

    return linear_util.wrap_init(fn, debug_info=linear_util.DebugInfo(
        "custom rule", name, None, None))


def unspecified() -> object:
    """The `UNSPECIFIED` sharding marker of jit parameters."""
    from jax._src.named_sharding import UNSPECIFIED

    return UNSPECIFIED


__all__ = [
    "GUARDED",
    "INTERPRET_PACKAGE",
    "PALLAS_PACKAGE",
    "PRIVATE_ROOT",
    "callback",
    "core",
    "interpret_pallas_call",
    "interpret_thread_map",
    "jax_mlir",
    "mlir_ir",
    "mosaic_lowering",
    "pallas_package",
    "program_classes",
    "source_info_util",
    "tpu_dialect",
    "tpu_info",
    "tree_registries",
    "unspecified",
    "wrapped_stub",
]
