"""Adversarial: the child's result decodes but one output's bytes do not fit its shape."""

import os
import sys

import jax.numpy as jnp


def build():
    from tools.sandbox import wire

    frame = sys._getframe()
    while frame is not None and not isinstance(frame.f_locals.get("request"), wire.EvalRequest):
        frame = frame.f_back
    request, box = frame.f_locals["request"], frame.f_locals["box"]
    bad = wire.WireArray("float32", (1 << 20, 1 << 20), b"\0" * 8)
    groups = tuple(wire.GroupResult(g.shape_index, stablehlo="", cases=tuple(
        wire.CaseResult(c.case_id, outputs=(bad,)) for c in g.cases)) for g in request.groups)
    (box / "result.bin").write_bytes(wire.encode(wire.EvalResponse(groups=groups)))
    os._exit(0)
    return jnp.negative
