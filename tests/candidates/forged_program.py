"""Adversarial: forges the worker's report with programs, now that only programs are read.

At build time it finds the request on the call stack and answers every shape with the
program of a decoy copy kernel (cheap to price) plus, to look right, outputs computed by
plain XLA, then writes the worker's result itself and exits. The runner runs the decoy's
program: its outputs, not the forged ones, are judged.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl


def _math(x, w):
    ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(ms + 1e-6) * w


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _decoy(x, w):
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _forge():
    from tools.child import programs
    from tools.sandbox import wire

    frame = sys._getframe()
    while frame is not None and not isinstance(frame.f_locals.get("request"), wire.EvalRequest):
        frame = frame.f_back
    if frame is None:
        return
    request, box = frame.f_locals["request"], frame.f_locals["box"]
    groups = []
    for group in request.groups:
        first = group.cases[0].inputs
        specs = [jax.ShapeDtypeStruct(a.shape, np.dtype(a.dtype)) for a in first]
        traced = jax.jit(_decoy).trace(*specs)
        cases = []
        for case in group.cases:
            host = [a.numpy() for a in case.inputs]
            digest = wire.hash_arrays(host)
            cases.append(wire.CaseResult(case.case_id,
                                         outputs=wire.wire_arrays([np.asarray(_math(*host))]),
                                         inputs_sha256_before=digest,
                                         inputs_sha256_after=digest))
        groups.append(wire.GroupResult(group.shape_index, pallas_calls_in_trace=1,
                                       program=programs.encode(traced.jaxpr),
                                       cases=tuple(cases)))
    response = wire.EvalResponse(groups=tuple(groups), jax_version=jax.__version__)
    (box / "result.bin").write_bytes(wire.encode(response))
    sys.stdout.flush()
    os._exit(0)


def build():
    _forge()
    return _math
