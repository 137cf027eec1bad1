"""A traced program as data: what crosses from the child that imported the candidate to the
runner that never does.

The candidate's child traces ``build()``'s kernel once per shape and sends the jaxpr in
this form; the runner rebuilds it, lowers it for TPU and runs it under interpret mode
itself, so the lowered text and the outputs the verdict follows from are computed by code
the candidate never ran in. Nothing here executes what it reads: primitives are looked up
by name among JAX's own (a candidate's primitive cannot be named), parameters and effects
are rebuilt only from plain data (numbers, strings, dtypes, arrays, tuples) and from the
classes of :func:`tools.jaxprivate.program_classes`; anything else fails to encode or
decode with its type named. Python callables (a custom_jvp rule, an index-map function)
cannot be sent; the places JAX keeps one that evaluation never calls get a stub.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from kernelgraph.errors import KernelgraphError
from tools import jaxprivate
from tools.sandbox.wire import numpy_dtype

FORMAT = 1
_MAX_DEPTH = 200
_NO_FIELDS = frozenset({"DMASemaphore", "Semaphore", "BarrierSemaphore"})  # semaphore dtypes
# (primitive, parameter) holding a callable that evaluation and lowering never call.
_STUBBED = {("custom_jvp_call", "jvp_jaxpr_fun"), ("custom_jvp_call", "jvp_jaxpr_thunk"),
            ("custom_vjp_call", "fwd_jaxpr_thunk"), ("custom_vjp_call", "bwd"),
            ("custom_vjp_call", "out_trees")}


class ProgramError(KernelgraphError, ValueError):
    """A program that cannot be sent or rebuilt (a type, primitive or callable not allowed)."""


def _stub(*_args: Any, **_kwargs: Any) -> Any:
    raise ProgramError("a derivative rule was called; the verifier evaluates programs only")


def _stub_for(primitive: str, param: str) -> Any:
    if param in ("jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd"):
        return jaxprivate.wrapped_stub(_stub, f"{primitive}.{param}")
    return _stub


@functools.cache
def primitives() -> dict[str, Any]:
    """JAX's own primitives by a name that is the same in every process: the primitive's
    name, or ``name@module.attr`` where two share one. Built from JAX's modules only."""
    core = jaxprivate.core()
    places: dict[int, tuple[Any, list[str]]] = {}
    for module_name in sorted(n for n in list(sys.modules) if n == "jax" or n.startswith("jax.")):
        module = sys.modules.get(module_name)
        for attr, value in sorted(vars(module).items()) if module else ():
            if isinstance(value, core.Primitive):
                places.setdefault(id(value), (value, []))[1].append(f"{module_name}.{attr}")
    by_name: dict[str, list[tuple[Any, list[str]]]] = {}
    for prim, where in places.values():
        by_name.setdefault(prim.name, []).append((prim, where))
    table: dict[str, Any] = {}
    for name, found in by_name.items():
        if len(found) == 1:
            table[name] = found[0][0]
        else:
            for prim, where in found:
                table[f"{name}@{min(where)}"] = prim
    return table


@functools.cache
def _keys() -> dict[int, str]:
    return {id(p): k for k, p in primitives().items()}


@functools.cache
def _classes() -> tuple[dict[str, type], dict[type, str]]:
    named = jaxprivate.program_classes()
    return named, {cls: name for name, cls in named.items()}


def encode(closed_jaxpr: Any) -> bytes:
    """The program as msgpack data (raises ProgramError naming what cannot be sent)."""
    return msgspec.msgpack.encode([FORMAT, _Encoder().closed(closed_jaxpr)])


def decode(data: bytes) -> Any:
    """The ClosedJaxpr ``data`` describes, built from JAX's own primitives and classes."""
    try:
        version, body = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise ProgramError(f"not an encoded program: {exc}") from None
    if version != FORMAT:
        raise ProgramError(f"program format {version!r}, expected {FORMAT}")
    try:
        return _Decoder().closed(body, 0)
    except ProgramError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ProgramError(f"malformed program: {type(exc).__name__}: {exc}") from None


def as_function(closed: Any) -> Callable[..., list[Any]]:
    """A rebuilt program as a function of its inputs: JAX's own evaluation of the jaxpr."""
    evaluate = jaxprivate.core().jaxpr_as_fun(closed)

    def program(*args: Any) -> list[Any]:
        return list(evaluate(*args))

    return program


class _Encoder:
    def __init__(self) -> None:
        self.var_ids: dict[int, int] = {}

    def var(self, v: Any) -> int:
        return self.var_ids.setdefault(id(v), len(self.var_ids))

    def closed(self, cj: Any) -> list[Any]:
        return [self.jaxpr(cj.jaxpr), [self.value(c) for c in cj.consts]]

    def binder(self, v: Any) -> list[Any]:
        core = jaxprivate.core()
        if isinstance(v, core.DropVar):
            return [-1, self.value(v.aval)]
        return [self.var(v), self.value(v.aval)]

    def atom(self, a: Any) -> list[Any]:
        core = jaxprivate.core()
        if isinstance(a, core.Literal):
            return ["lit", self.value(a.val), self.value(a.aval)]
        return ["var", self.var(a)]

    def jaxpr(self, j: Any) -> dict[str, Any]:
        return {
            "constvars": [self.binder(v) for v in j.constvars],
            "invars": [self.binder(v) for v in j.invars],
            "eqns": [self.eqn(e) for e in j.eqns],
            "outvars": [self.atom(a) for a in j.outvars],
            "effects": self.effects(j.effects),
            "debug": self.value(j.debug_info),
        }

    def eqn(self, e: Any) -> dict[str, Any]:
        key = _keys().get(id(e.primitive))
        if key is None:
            raise ProgramError(f"primitive `{e.primitive.name}` is not one of JAX's own")
        params = {}
        for name, value in e.params.items():
            if (e.primitive.name, name) in _STUBBED:
                params[name] = ["stub"]
            else:
                params[name] = self.value(value)
        return {"p": key, "in": [self.atom(a) for a in e.invars],
                "out": [self.binder(v) for v in e.outvars], "params": params,
                "effects": self.effects(e.effects)}

    def effects(self, effects: Any) -> list[Any]:
        return [self.value(x) for x in sorted(effects, key=repr)]

    def value(self, v: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise ProgramError("a parameter nested too deeply")
        core = jaxprivate.core()
        if v is None or type(v) in (bool, int, float, str):
            return v
        typed = _classes()[1].get(type(v), "")
        if typed in ("TypedInt", "TypedFloat", "TypedComplex"):
            plain = {"TypedInt": int, "TypedFloat": float, "TypedComplex": complex}[typed](v)
            if typed == "TypedComplex":
                return ["typed", typed, [plain.real, plain.imag], v.dtype.name]
            return ["typed", typed, plain, v.dtype.name]
        if typed == "TypedNdArray":
            return ["typed", typed, self.value(np.asarray(v), depth + 1),
                    self.value(v.aval, depth + 1)]
        if type(v) in (tuple, list):
            return ["tuple" if isinstance(v, tuple) else "list",
                    [self.value(x, depth + 1) for x in v]]
        if isinstance(v, core.ClosedJaxpr):
            return ["closed_jaxpr", self.closed(v)]
        if isinstance(v, core.Jaxpr):
            return ["jaxpr", self.jaxpr(v)]
        if isinstance(v, core.Var):
            return ["var", self.var(v)]
        if isinstance(v, np.dtype):
            return ["dtype", v.name]
        if isinstance(v, np.generic | np.ndarray) or (
                hasattr(v, "__array__") and hasattr(v, "dtype") and not isinstance(v, type)):
            host = np.array(v, order="C", copy=True)  # ascontiguousarray makes 0-d arrays 1-d
            return ["array", host.dtype.name, list(host.shape), host.tobytes(),
                    isinstance(v, np.generic)]
        if isinstance(v, dict):
            return ["dict", [[self.value(k, depth + 1), self.value(x, depth + 1)]
                             for k, x in v.items()]]
        if type(v).__name__ == "FrozenDict":
            return ["frozendict", [[self.value(k, depth + 1), self.value(x, depth + 1)]
                                   for k, x in dict(v).items()]]
        if type(v).__name__ == "PyTreeDef":
            return ["tree", self.tree(v, depth + 1)]
        if v is jaxprivate.unspecified():
            return ["unspecified"]
        named = _classes()[1].get(type(v))
        if named is None:
            raise ProgramError(f"a parameter of type {type(v).__module__}."
                               f"{type(v).__qualname__} cannot be sent to the runner")
        if isinstance(v, enum.Enum):
            return ["enum", named, v.name]
        return ["object", named, self.fields(v, depth + 1)]

    def fields(self, v: Any, depth: int) -> list[Any]:
        core = jaxprivate.core()
        if isinstance(v, core.ShapedArray):
            return [["shape", self.value(v.shape, depth)], ["dtype", self.value(v.dtype, depth)],
                    ["weak_type", v.weak_type]]
        if type(v).__name__ == "AbstractRef":
            return [["inner_aval", self.value(v.inner_aval, depth)],
                    ["memory_space", self.value(v.memory_space, depth)]]
        if type(v).__name__ == "DebugInfo":
            paths = v.result_paths if isinstance(v.result_paths, tuple | type(None)) else None
            return [["traced_for", v.traced_for], ["func_src_info", v.func_src_info],
                    ["arg_names", self.value(v.arg_names, depth)],
                    ["result_paths", self.value(paths, depth)]]
        if type(v).__name__ in ("Mesh", "AbstractMesh"):
            if getattr(v, "empty", False) or not getattr(v, "shape_tuple", ()):
                return []
            raise ProgramError("a program on a device mesh cannot be sent to the runner")
        if type(v).__name__.endswith("Effect"):
            return [["input", self.value(v.input, depth)]]
        if type(v).__name__ in _NO_FIELDS:
            return []
        if isinstance(v, tuple) and hasattr(type(v), "_fields"):  # a NamedTuple record
            return [[name, self.value(getattr(v, name), depth)] for name in type(v)._fields]
        if not dataclasses.is_dataclass(v):
            raise ProgramError(f"{type(v).__qualname__} is not a plain record")
        out = []
        for f in dataclasses.fields(v):
            if not f.init:
                continue
            value = getattr(v, f.name)
            if callable(value) and not isinstance(value, type) and value is not None and \
                    not hasattr(value, "dtype"):
                raise ProgramError(f"{type(v).__qualname__}.{f.name} holds a Python callable")
            out.append([f.name, self.value(value, depth)])
        return out

    def tree(self, treedef: Any, depth: int) -> list[Any]:
        if depth > _MAX_DEPTH:
            raise ProgramError("a tree nested too deeply")
        data = treedef.node_data()
        if data is None:
            return ["leaf"]
        kind, aux = data
        if kind in (tuple, list, type(None)):
            name = kind.__name__
        elif kind is dict:
            name = "dict"
        else:
            name = _classes()[1].get(kind)
            if name is None:
                raise ProgramError(f"a tree node of type {kind.__qualname__} cannot be sent")
        return [name, self.value(aux, depth), [self.tree(c, depth + 1) for c in treedef.children()]]


class _Decoder:
    def __init__(self) -> None:
        self.vars: dict[int, Any] = {}

    def closed(self, body: list[Any], depth: int) -> Any:
        core = jaxprivate.core()
        jaxpr_body, consts = body
        jaxpr = self.jaxpr(jaxpr_body, depth)
        return core.ClosedJaxpr(jaxpr, [self.value(c, depth) for c in consts])

    def binder(self, item: list[Any], depth: int) -> Any:
        core = jaxprivate.core()
        ident, aval = item
        aval = self.value(aval, depth)
        if ident == -1:
            return core.DropVar(aval)
        if not isinstance(ident, int) or ident in self.vars:
            raise ProgramError(f"variable {ident!r} bound twice")
        self.vars[ident] = core.Var(aval)
        return self.vars[ident]

    def atom(self, item: list[Any], depth: int) -> Any:
        core = jaxprivate.core()
        if item[0] == "lit":
            return core.Literal(self.value(item[1], depth), self.value(item[2], depth))
        if item[0] == "var":
            return self.vars[item[1]]
        raise ProgramError(f"not an atom: {item[0]!r}")

    def jaxpr(self, body: dict[str, Any], depth: int) -> Any:
        """One jaxpr in its own variable scope: sub-jaxprs are closed, and JAX shares one
        sub-jaxpr object between calls (two `jnp.where`s), so the same ids recur in them."""
        outer, self.vars = self.vars, {}
        try:
            return self._jaxpr(body, depth)
        finally:
            self.vars = outer

    def _jaxpr(self, body: dict[str, Any], depth: int) -> Any:
        core = jaxprivate.core()
        source_info = jaxprivate.source_info_util().new_source_info()
        constvars = [self.binder(v, depth) for v in body["constvars"]]
        invars = [self.binder(v, depth) for v in body["invars"]]
        eqns = []
        for e in body["eqns"]:
            prim = primitives().get(e["p"])
            if prim is None:
                raise ProgramError(f"primitive `{e['p']}` is not one of JAX's own")
            ins = [self.atom(a, depth) for a in e["in"]]
            params = {name: _stub_for(prim.name, name)
                      if value == ["stub"] and (prim.name, name) in _STUBBED
                      else self.value(value, depth + 1) for name, value in e["params"].items()}
            effects = {self.value(x, depth) for x in e["effects"]}
            outs = [self.binder(v, depth) for v in e["out"]]
            eqns.append(core.new_jaxpr_eqn(ins, outs, prim, params, effects, source_info))
        outvars = [self.atom(a, depth) for a in body["outvars"]]
        effects = {self.value(x, depth) for x in body["effects"]}
        return core.Jaxpr(constvars, invars, outvars, eqns, effects,
                          self.value(body["debug"], depth))

    def value(self, v: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise ProgramError("a parameter nested too deeply")
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if not isinstance(v, list) or not v or not isinstance(v[0], str):
            raise ProgramError(f"not an encoded value: {type(v).__name__}")
        tag = v[0]
        if tag in ("tuple", "list"):
            items = [self.value(x, depth + 1) for x in v[1]]
            return tuple(items) if tag == "tuple" else items
        if tag == "closed_jaxpr":
            return self.closed(v[1], depth + 1)
        if tag == "jaxpr":
            return self.jaxpr(v[1], depth + 1)
        if tag == "var":
            return self.vars[v[1]]
        if tag == "dtype":
            return numpy_dtype(v[1])
        if tag == "array":
            _, dtype, shape, data, scalar = v
            array = np.frombuffer(data, dtype=numpy_dtype(dtype)).reshape(shape).copy()
            return array[()] if scalar else array
        if tag in ("dict", "frozendict"):
            items = {self.value(k, depth + 1): self.value(x, depth + 1) for k, x in v[1]}
            return items if tag == "dict" else _frozendict(items)
        if tag == "tree":
            return self.tree(v[1], depth + 1)
        if tag == "unspecified":
            return jaxprivate.unspecified()
        named = _classes()[0]
        if tag == "typed" and v[1] in ("TypedInt", "TypedFloat", "TypedComplex", "TypedNdArray"):
            _, name, plain, dtype = v
            if name == "TypedInt":
                plain = int(plain)
            elif name == "TypedFloat":
                plain = float(plain)
            elif name == "TypedComplex":
                plain = complex(float(plain[0]), float(plain[1]))
            else:
                return named[name](np.asarray(self.value(plain, depth + 1)),
                                   self.value(dtype, depth + 1))
            return named[name](plain, numpy_dtype(dtype))
        if tag == "enum":
            cls = named[v[1]]
            if not issubclass(cls, enum.Enum):
                raise ProgramError(f"{v[1]} is not an enumeration")
            return cls[v[2]]
        if tag == "object":
            return self.object(named[v[1]], v[1], v[2], depth + 1)
        raise ProgramError(f"unknown value tag {tag!r}")

    def object(self, cls: type, name: str, fields: list[Any], depth: int) -> Any:
        values = {str(k): self.value(x, depth) for k, x in fields}
        if name == "ShapedArray":
            return cls(tuple(values["shape"]), values["dtype"], weak_type=values["weak_type"])
        if name in ("Mesh", "AbstractMesh"):
            return cls((), ()) if name == "AbstractMesh" else cls(np.empty((), dtype=object), ())
        if name.endswith("Effect"):
            return cls(values["input"])
        if name == "DebugInfo":
            return cls(values["traced_for"], values["func_src_info"], values["arg_names"],
                       values["result_paths"])
        if issubclass(cls, enum.Enum):
            raise ProgramError(f"{name} is an enumeration")
        if cls.__name__ in _NO_FIELDS:
            return cls()
        return cls(**values)

    def tree(self, node: list[Any], depth: int) -> Any:
        import jax

        if depth > _MAX_DEPTH:
            raise ProgramError("a tree nested too deeply")
        if node == ["leaf"]:
            return jax.tree_util.tree_structure(0)
        name, aux, children = node
        kinds = {"tuple": tuple, "list": list, "NoneType": type(None), "dict": dict}
        kind = kinds.get(name) or _classes()[0][name]
        kids = [self.tree(c, depth + 1) for c in children]
        aux = self.value(aux, depth)
        treedef_type = type(jax.tree_util.tree_structure(0))
        for registry in jaxprivate.tree_registries():
            try:
                return treedef_type.from_node_data_and_children(registry, (kind, aux), kids)
            except RuntimeError:  # not registered in this one
                continue
        raise ProgramError(f"a tree node of type {name} is not registered")


def _frozendict(items: dict[Any, Any]) -> Any:
    import jax

    return jax.tree_util.FrozenDict(items) if hasattr(jax.tree_util, "FrozenDict") else items
